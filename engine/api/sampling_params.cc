#include "engine/api/sampling_params.h"

#include <cmath>

#include "engine/common/strings.h"

namespace loom {
namespace {

absl::Status Invalid(std::string_view param, std::string_view rule) {
  return absl::InvalidArgumentError(StrCat(param, " ", rule));
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p, int32_t vocab_size) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return Invalid("temperature", "must be a finite number >= 0");
  }
  if (p.top_k < 0) return Invalid("top_k", "must be >= 0 (0 disables it)");
  if (!(p.top_p > 0 && p.top_p <= 1)) return Invalid("top_p", "must be in (0, 1]");
  if (!(p.min_p >= 0 && p.min_p <= 1)) return Invalid("min_p", "must be in [0, 1]");
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty)) {
    return Invalid("repetition_penalty", "must be a finite number > 0");
  }
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2)) {
    return Invalid("frequency_penalty", "must be in [-2, 2]");
  }
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2)) {
    return Invalid("presence_penalty", "must be in [-2, 2]");
  }
  for (const auto& [token, bias] : p.logit_bias) {
    if (token.value() < 0 || token.value() >= vocab_size) {
      return Invalid("logit_bias", StrCat("names token ", token.value(),
                                                " outside the vocabulary [0, ", vocab_size, ")"));
    }
    if (!std::isfinite(bias)) return Invalid("logit_bias", "values must be finite");
  }
  if (p.min_tokens < 0) return Invalid("min_tokens", "must be >= 0");
  for (TokenId token : p.min_tokens_banned_ids) {
    if (token.value() < 0 || token.value() >= vocab_size) {
      return Invalid("min_tokens_banned_ids", StrCat("names token ", token.value(),
                                                           " outside the vocabulary"));
    }
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    return Invalid("logprobs", StrCat("must be in [0, ", kMaxLogprobs, "]"));
  }
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > kMaxLogprobs) {
    return Invalid("prompt_logprobs", StrCat("must be in [0, ", kMaxLogprobs, "]"));
  }
  return absl::OkStatus();
}

}  // namespace loom
