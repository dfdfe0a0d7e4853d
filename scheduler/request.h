// What the server hands the continuous-batching scheduler, and what it gets back per step.
//
// Plain data. The server validates client input (sampling ranges, context length, vocabulary)
// before building a SchedRequest; the scheduler re-checks only what would break its own
// invariants and reports it as a Status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/api/ids.h"
#include "engine/api/sampling_params.h"
#include "engine/api/step.h"

namespace loom {

// One API request; its `n` choices are separate sequences.
using RequestId = StrongId<struct RequestIdTag, uint64_t>;

struct SchedRequest {
  RequestId id;
  std::vector<TokenId> prompt;
  // Carried to the engine; each choice i > 0 draws with seed + i.
  // sampling.prompt_logprobs >= 0 asks for the prompt's log-probabilities (OpenAI `echo` with
  // `logprobs`): choice 0 computes its whole prompt (no prefix-cache hit) to report them.
  SamplingParams sampling;
  // 0: only the prompt is computed (for its log-probabilities); nothing is generated and every
  // choice finishes with kLength.
  int32_t max_new_tokens = 16;
  // A sampled token from this list ends the choice (the token is kept in the output). The
  // server puts the model's end-of-sequence ids here unless the client asked to ignore them.
  std::vector<TokenId> stop_token_ids;
  // Lower runs first; ties go to the earlier arrival (vLLM's convention).
  int32_t priority = 0;
  // Isolates this request's prefix-cache entries from those of other salts (tenants).
  std::string cache_salt;
  // Absolute time on the scheduler's clock after which the request finishes with kDeadline;
  // 0 = none.
  int64_t deadline_ms = 0;
  // Choices; they share the prompt's KV blocks through the prefix cache.
  int32_t n = 1;
};

enum class FinishReason {
  kNone = 0,   // still running
  kLength,     // max_new_tokens or the model's context reached
  kStop,       // a stop token was sampled
  kAbort,      // the client went away or asked to stop
  kDeadline,   // deadline_ms passed
};

const char* FinishReasonName(FinishReason reason);

// What one choice of a request produced since the last report.
struct ChoiceOutput {
  RequestId request_id;
  int32_t index = 0;  // the choice, 0 .. n-1
  std::vector<TokenId> new_tokens;
  std::vector<PositionLogprobs> logprobs;
  // Choice 0 only, when sampling.prompt_logprobs >= 0: the next prompt positions' scores, in
  // order. Entry i of all reports taken together scores prompt token i + 1 (the first prompt
  // token has no score); each is reported once, even across preemptions, and all of them
  // before any choice's first token.
  std::vector<PositionLogprobs> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;
  int32_t num_prompt_tokens = 0;
  // Prompt tokens whose K/V came from the prefix cache at this choice's (latest) admission.
  int32_t num_cached_tokens = 0;
  // When the choice was first scheduled, on the scheduler's clock (-1: not yet).
  int64_t first_scheduled_ms = -1;
};

}  // namespace loom
