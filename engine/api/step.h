// The step contract between the scheduler and the engine (shared/ARCHITECTURE.md §3).
//
// Each call of Executor::Execute runs one StepPlan: a ragged batch in which some sequences
// compute a chunk of their prompt and others a single decode token. The scheduler owns logical
// blocks and decides everything; the engine owns the physical KV pool and per-sequence token
// state and only executes.
//
// Engine-side state of a sequence, from its first plan until it is named in `finished`:
//   token_ids           prompt, then every token the engine sampled for it
//   num_computed_tokens tokens whose K/V are in the cache
//   block_table         physical blocks, in position order
// A step computes positions [num_computed_tokens, num_computed_tokens + num_scheduled_tokens);
// when that reaches the end of token_ids the sequence samples one token, which is appended to
// token_ids and reported in the StepResult. A sequence that is preempted is named in `finished`
// and later comes back as a new sequence carrying all its tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/api/expert_hints.h"
#include "engine/api/ids.h"
#include "engine/api/sampling_params.h"

namespace loom {

// KV data on the host, as a KV transfer moves it (shared/ARCHITECTURE.md §3: swap, live
// migration). The bytes are the pool's own format, so both ends must hold the same layout:
// `layout` is KvCapacity::kv_layout of the exporting engine, and an import into an engine with
// another layout is refused.
struct KvBlob {
  std::string layout;
  // The blocks, one after another; each block is every layer in order, K then V, with exactly
  // the bytes the pool keeps for that block (low-bit formats: codes, scales and zeros).
  int32_t num_blocks = 0;
  std::vector<uint8_t> blocks;
  // Low-bit formats with a residual tail, when the export named a sequence: its tail slot's
  // bytes (every layer, K then V, the whole ring) and the first block it computed itself.
  // Empty otherwise.
  std::vector<uint8_t> tail;
  int32_t tail_first_block = 0;
};

// Export: copy `blocks` (and, when `tail_of` names a sequence the engine holds, its residual
// tail) into `*out` before the step's forward pass, so the bytes are those every earlier step
// wrote. `out` is filled when Execute returns OK; the engine keeps no reference to it.
struct KvExport {
  std::vector<BlockId> blocks;
  SequenceId tail_of{0};  // 0: no sequence
  std::shared_ptr<KvBlob> out;
};

// Import: write `data`'s blocks into `blocks` (same count, same layout) before the step runs.
// The blocks must be held by no sequence the engine knows (the scheduler reserved them).
struct KvImport {
  std::vector<BlockId> blocks;
  std::shared_ptr<const KvBlob> data;
};

// A sequence the engine has not seen (a new request, or one resumed after preemption).
struct NewSequencePlan {
  SequenceId seq_id;
  // The prompt, followed by tokens generated before a preemption.
  std::vector<TokenId> token_ids;
  // How many leading token_ids are prompt (penalties and prompt log-probabilities use it).
  int32_t num_prompt_tokens = 0;
  // Blocks holding positions [0, num_computed_tokens + num_scheduled_tokens), in order.
  std::vector<BlockId> block_table;
  // Leading tokens whose K/V are already in block_table (a prefix-cache hit); 0 otherwise.
  int32_t num_computed_tokens = 0;
  // Tokens to compute in this step; >= 1.
  int32_t num_scheduled_tokens = 0;
  SamplingParams sampling;
  // A sequence resumed from a KV transfer whose blocks were imported (num_computed_tokens > 0):
  // for low-bit formats, the exported blob whose residual tail (and tail_first_block) it takes
  // over. Null otherwise; ignored by element formats.
  std::shared_ptr<const KvBlob> imported_tail;
};

// A sequence the engine already holds: compute its next tokens.
struct ContinuingSequencePlan {
  SequenceId seq_id;
  // Blocks appended to its block table before this step runs.
  std::vector<BlockId> new_block_ids;
  // Tokens to compute in this step: a prefill chunk, or 1 for a decode; >= 1.
  int32_t num_scheduled_tokens = 0;
};

// Copy one block's K/V (all layers) to another before the step runs (copy-on-write).
struct BlockCopy {
  BlockId src;
  BlockId dst;
};

struct StepPlan {
  uint64_t step_id = 0;
  // Sequences whose engine state is dropped before this step runs (finished, aborted or
  // preempted). Their blocks are the scheduler's to reuse.
  std::vector<SequenceId> finished;
  std::vector<BlockCopy> block_copies;
  // KV transfers, run before the forward pass, in this order: block copies, imports, exports
  // (an export sees imported and copied blocks).
  std::vector<KvImport> kv_imports;
  std::vector<KvExport> kv_exports;
  std::vector<NewSequencePlan> new_sequences;
  std::vector<ContinuingSequencePlan> continuing;
  // Mixture-of-experts models: report which experts each layer routed each sequence's tokens
  // to (SequenceOutput::expert_counts). Off, nothing is counted; ignored by dense models.
  bool report_expert_routing = false;
  // Mixture-of-experts models with an expert cache (KvCapacity::expert_cache_slots > 0), from the
  // scheduler's expert policy (engine/api/expert_hints.h):
  //   expert_scores    how much to keep each expert; replaces the previous scores when non-empty
  //                    (experts not named score 0). Applied before the step's forward pass.
  //   expert_prefetch  loads to start as the step's forward pass starts (they proceed while it
  //                    runs), most urgent first; replaces the hints not yet started (stale ones
  //                    are cancelled). A prefetch only takes a free slot or evicts an expert
  //                    scored below its urgency.
  // The engine serves the step's own needs first (on demand) whatever they say.
  ExpertScores expert_scores;
  ExpertPrefetchHints expert_prefetch;
};

// A token with its log-probability (natural log, from the raw model distribution).
struct TokenLogprob {
  TokenId token_id;
  float logprob = 0.0f;
};

// Log-probabilities reported at one position.
struct PositionLogprobs {
  // The token at (or sampled for) this position and its log-probability.
  TokenLogprob token;
  // Its rank in the distribution, 1 = most likely.
  int32_t rank = 0;
  // The most likely tokens, most likely first (SamplingParams::logprobs of them).
  std::vector<TokenLogprob> top;
};

// What one sequence produced in a step.
struct SequenceOutput {
  SequenceId seq_id;
  // The sampled token; absent (kNoToken) when the step only advanced a prefill chunk.
  TokenId token_id{-1};
  // Present when SamplingParams::logprobs >= 0 and a token was sampled.
  std::vector<PositionLogprobs> logprobs;
  // Present when SamplingParams::prompt_logprobs >= 0: one entry per prompt position computed
  // in this step that has a successor in the prompt (position p scores token p + 1).
  std::vector<PositionLogprobs> prompt_logprobs;
  // Index of the first prompt position in prompt_logprobs.
  int32_t prompt_logprobs_start = 0;
  // Present when StepPlan::report_expert_routing and the model is a mixture of experts: for
  // the tokens the sequence computed in this step, how many each layer routed to each expert,
  // row-major [num_layers, num_experts] (ModelInfo). Every token counts once for each of its
  // num_experts_per_tok experts in every sparse layer; rows of dense layers are zero.
  std::vector<int32_t> expert_counts;

  bool has_token() const { return token_id.value() >= 0; }
};

struct StepTimings {
  double prepare_ms = 0;  // plan validation, metadata, block copies
  double forward_ms = 0;  // the model
  double sample_ms = 0;   // logits to tokens
};

struct StepResult {
  uint64_t step_id = 0;
  // One entry per sequence in the plan (new and continuing), in plan order: new sequences first.
  std::vector<SequenceOutput> outputs;
  int32_t num_tokens_computed = 0;
  StepTimings timings;
  // Mixture-of-experts models with an expert cache: its counters after this step.
  ExpertCacheCounters expert_cache;
};

}  // namespace loom
