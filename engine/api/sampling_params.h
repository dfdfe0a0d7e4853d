// How the engine turns a sequence's logits into its next token, and what it reports about them.
//
// Plain data, filled and validated by the server (ranges below), carried in the StepPlan when a
// sequence is first scheduled. The engine applies, in order: raw log-probabilities for reporting;
// logit bias; the min_tokens ban; repetition, frequency and presence penalties; then either
// greedy argmax (temperature == 0) or temperature, top-k, top-p and min-p filtering followed by a
// draw from a generator keyed by (seed, output index), so a sequence draws the same tokens
// whatever else is in its batch and after a preemption that recomputes it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/api/ids.h"

namespace loom {

// Most top log-probabilities one position may report.
inline constexpr int32_t kMaxLogprobs = 20;

struct SamplingParams {
  // 0 selects greedy decoding; otherwise > 0.
  float temperature = 1.0f;
  // Keep the k most likely tokens; 0 disables. >= 0.
  int32_t top_k = 0;
  // Keep the smallest set of most likely tokens whose probability reaches top_p. (0, 1].
  float top_p = 1.0f;
  // Drop tokens whose probability is below min_p times the most likely one's. [0, 1].
  float min_p = 0.0f;
  // Hugging Face style: logits of tokens present in the prompt or the output are divided by it
  // when positive and multiplied by it when negative. 1 disables. > 0.
  float repetition_penalty = 1.0f;
  // OpenAI style, over output tokens only: logit -= frequency_penalty * count(token)
  // + presence_penalty * (count(token) > 0). 0 disables. [-2, 2].
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // Added to the logits of the named tokens before penalties.
  std::vector<std::pair<TokenId, float>> logit_bias;
  // While fewer than min_tokens tokens have been generated, these tokens (the end-of-sequence
  // and stop tokens, filled by the server) cannot be sampled.
  int32_t min_tokens = 0;
  std::vector<TokenId> min_tokens_banned_ids;
  // Keys the random generator. The server picks one when the client gives none.
  uint64_t seed = 0;
  // Log-probabilities to report for each sampled token: -1 none, 0 the sampled token's only,
  // k > 0 also the k most likely tokens. Computed from the raw model distribution.
  int32_t logprobs = -1;
  // The same for prompt positions (OpenAI `echo` with `logprobs`); -1 none.
  int32_t prompt_logprobs = -1;

  bool greedy() const { return temperature == 0.0f; }
};

// Checks every field against the ranges documented above; the message names the field.
absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t vocab_size);

}  // namespace loom
