// Runs a fixed set of requests to completion on an Executor: the offline (batch) mode behind
// `loom generate`, the engine benchmark and the golden tests.
//
// Policy, deliberately simple and deterministic: every step takes one decode token from each
// sequence that has finished its prompt, then fills the rest of the token budget with prompt
// chunks (at most `prefill_chunk` tokens per sequence and step when set) in request order.
// A request is admitted only when the free KV blocks cover its whole prompt plus max_new_tokens,
// so no sequence is ever preempted. The continuous-batching scheduler of the server is separate.
//
// Thread safety: call from one thread; the executor is used only by this call while it runs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/executor.h"

namespace loom {

struct OfflineRequest {
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  int32_t max_new_tokens = 16;
  // Stop after sampling one of these (the token is kept in the output).
  std::vector<TokenId> stop_token_ids;
  // Not admitted before this step (tests use it to start sequences while others decode).
  int32_t first_step = 0;
};

enum class OfflineFinish { kLength, kStopToken };

struct OfflineResult {
  std::vector<TokenId> output_tokens;
  std::vector<PositionLogprobs> logprobs;
  std::vector<PositionLogprobs> prompt_logprobs;
  OfflineFinish finish = OfflineFinish::kLength;
  SequenceId seq_id;
};

struct OfflineOptions {
  // Most prompt tokens one sequence computes per step; 0 = as many as the budget allows.
  int32_t prefill_chunk = 0;
  // Step token budget; 0 = the executor's max_num_batched_tokens.
  int32_t max_num_batched_tokens = 0;
  // First sequence id to use (ids are consecutive in request order).
  uint64_t first_seq_id = 1;
};

// Time and tokens by kind of step. A step that computes any prompt token is a prefill step:
// prefill_tokens counts the prompt tokens of those steps and prefill_ms their time. decode_tokens
// and decode_ms cover only the steps that compute no prompt token (decode tokens riding along in
// a prefill step are in neither count), so decode_tokens / decode_ms is the generation speed.
struct OfflineStats {
  int64_t num_steps = 0;
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
  // Wall time of the first step that produced each request's first token, from the start.
  std::vector<double> first_token_ms;
  // The engine's expert cache counters after the last step (cumulative since the engine
  // started; all zero without a cache).
  ExpertCacheCounters expert_cache;
};

// Results are in request order. Requests are checked before the first step: an empty prompt,
// max_new_tokens < 1, a token outside the vocabulary, or a prompt plus max_new_tokens longer than
// the context is InvalidArgument, and a KV demand larger than the whole cache ResourceExhausted,
// each naming the request's index. When a step fails, the sequences the executor still holds are
// released before the step's error is returned.
absl::StatusOr<std::vector<OfflineResult>> RunOffline(Executor& executor,
                                                      std::span<const OfflineRequest> requests,
                                                      const OfflineOptions& options = {},
                                                      OfflineStats* stats = nullptr);

}  // namespace loom
