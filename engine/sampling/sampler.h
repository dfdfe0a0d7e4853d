// The sampler: turns one sequence's logits into its next token, with log-probabilities.
//
// `Sample` applies SamplingParams (engine/api/sampling_params.h) to the logits of one position,
// in this order:
//   1. Log-probabilities (when params.logprobs >= 0), from the raw logits before any of the
//      steps below: the sampled token's log-probability and rank, and the `logprobs` most likely
//      tokens (see ComputeLogprobs).
//   2. logit_bias: each (token, bias) pair adds bias to that token's logit.
//   3. min_tokens: while output_token_ids.size() < min_tokens, every min_tokens_banned_ids logit
//      becomes -inf.
//   4. Penalties. repetition_penalty (Hugging Face): every distinct token present in the prompt
//      or the output gets logit > 0 ? logit / p : logit * p. Then frequency and presence
//      (OpenAI, output tokens only): logit -= frequency_penalty * count + presence_penalty *
//      (count > 0). Each is skipped entirely at its neutral value.
//   5. temperature == 0: greedy argmax, ties to the lowest id. Otherwise the probabilities
//      softmax(logit / temperature), in f32 as exp((logit - max) * (1 / temperature)) with the
//      reciprocal capped at the largest float, so that no temperature can overflow and the
//      most likely token always has weight exactly 1; then, over the tokens sorted by
//      probability (most likely first, ties by lower id) and always keeping at least the first:
//        top-k  keep the first top_k tokens (0 or >= vocab keeps all);
//        top-p  keep the shortest prefix whose mass reaches top_p times the mass left by top-k
//               (so top-p acts on the top-k-renormalised distribution, as in Hugging Face);
//        min-p  drop tokens whose probability is below min_p times the most likely one's.
//      Each filter keeps a prefix of that order, so the kept set is the shortest of the three.
//   6. The draw: one uniform u in [0, 1) from a counter-based generator keyed by (params.seed,
//      output_token_ids.size()), then the first kept token (in the order above) whose cumulative
//      mass exceeds u times the kept mass. A sequence therefore draws the same token whatever
//      else is in its batch, on whichever thread, and after a preemption that recomputes it.
//
// Edge cases:
//   - NaN logits count as -inf and +inf as the largest finite float; no returned token is ever
//     outside [0, vocab).
//   - When steps 2-4 leave no token with a finite logit, the sampler returns the greedy choice
//     over the *raw* logits of the tokens the min_tokens ban allows (all tokens when it bans
//     every one), ties and all -inf resolved to the lowest such id.
//   - Token ids outside [0, vocab) in the prompt, the output, logit_bias or the ban list are
//     ignored (the server validates them; the sampler never indexes out of bounds with them).
//
// Threading: the functions are pure apart from the SamplerScratch they are handed. The engine
// keeps one scratch per worker thread and may sample different sequences concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/api/ids.h"
#include "engine/api/sampling_params.h"
#include "engine/api/step.h"

namespace loom {

// What one sampling call needs to know about its sequence besides the logits.
struct SamplerInput {
  // Not owned; must outlive the call.
  const SamplingParams* params = nullptr;
  // The prompt (repetition_penalty only).
  std::span<const TokenId> prompt_token_ids;
  // Tokens generated so far (penalties, min_tokens). Its size is the index of the token being
  // sampled and, with params->seed, keys the random draw.
  std::span<const TokenId> output_token_ids;
};

struct SampleResult {
  TokenId token_id{-1};
  // Present when params->logprobs >= 0.
  std::optional<PositionLogprobs> logprobs;
};

// Buffers reused across calls so that sampling does not allocate once they have grown to the
// vocabulary size (only the returned log-probabilities allocate). One per thread; the contents
// are the sampler's own and carry no state from one call to the next.
struct SamplerScratch {
  // Per vocabulary entry, all zero between calls: occurrences in the output and flags.
  std::vector<int32_t> counts;
  std::vector<uint8_t> flags;
  // Distinct token ids whose counts/flags are set during a call (reset through this list).
  std::vector<int32_t> touched;
  // Raw logits of tokens changed by steps 2-4, for the all -inf fallback.
  std::vector<std::pair<int32_t, float>> saved_raw;
  // Copy of the raw logits when log-probabilities are requested.
  std::vector<float> raw_logits;
  // Sort keys of candidate tokens (probability descending, id ascending) and a radix buffer.
  std::vector<uint64_t> keys;
  std::vector<uint64_t> radix_buffer;
  // Cumulative kept mass along the sorted order.
  std::vector<double> cumulative;
  // Strided sample of probabilities for estimating a top-k threshold.
  std::vector<float> sample;
};

// Samples the next token of one sequence from `logits` ([vocab] f32, vocab >= 1), which the call
// uses as scratch: its contents afterwards are unspecified. Requires input.params != nullptr and
// params valid for this vocabulary (ValidateSamplingParams).
SampleResult Sample(std::span<float> logits, const SamplerInput& input, SamplerScratch& scratch);

// Log-probabilities at one position from its raw logits ([vocab] f32): log-softmax evaluated in
// f32 with a double-precision log-normaliser. Reports `token`'s log-probability and rank (its
// 1-based position when all tokens are ordered by logit descending, ties by lower id) and the
// first min(num_top, vocab) tokens of that order. NaN logits count as -inf, +inf as the largest
// finite float; when every logit is -inf every log-probability is -inf. Used for sampled tokens
// (through Sample) and directly for prompt positions. Requires 0 <= token < vocab.
PositionLogprobs ComputeLogprobs(std::span<const float> logits, TokenId token, int32_t num_top);

}  // namespace loom
