#include "server/api/param_validation.h"

#include <cmath>
#include <string>

#include "engine/api/sampling_params.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/api/api_status.h"

namespace loom::api {
namespace {

absl::Status CheckNumber(std::string_view name, double value, double lo, double hi) {
  if (std::isfinite(value) && value >= lo && value <= hi) return absl::OkStatus();
  return ParamError(name, StrCat("'", name, "' must be in [", lo, ", ", hi, "]; got ", value));
}

absl::Status CheckInt(std::string_view name, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return ParamError(name, StrCat("'", name, "' must be in [", lo, ", ", hi, "]; got ", value));
}

absl::Status CheckTokenIds(std::string_view name, const std::vector<int32_t>& ids, int32_t vocab) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      return ParamError(name, StrCat("token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLength(const CompletionParams& p, const ParamNames& names) {
  if (p.max_tokens.has_value()) {
    LOOM_RETURN_IF_ERROR(CheckInt(names.max_tokens, *p.max_tokens, 0, INT32_MAX));
    // Zero new tokens only makes sense when the prompt itself is the answer (echo).
    if (*p.max_tokens == 0 && !p.echo) {
      return ParamError(names.max_tokens, StrCat("'", names.max_tokens, "' must be at least 1"));
    }
  }
  LOOM_RETURN_IF_ERROR(CheckInt("min_tokens", p.min_tokens, 0, INT32_MAX));
  if (p.max_tokens.has_value() && *p.max_tokens > 0 && p.min_tokens > *p.max_tokens) {
    return ParamError("min_tokens", StrCat("'min_tokens' (", p.min_tokens, ") must not exceed '",
                                           names.max_tokens, "' (", *p.max_tokens, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckSampling(const CompletionParams& p, const ParseLimits& limits,
                           const ParamNames& names) {
  const auto name = [&](std::string_view field) { return StrCat(names.sampling_prefix, field); };
  LOOM_RETURN_IF_ERROR(CheckNumber(name("temperature"), p.temperature, 0, 2));
  if (!(std::isfinite(p.top_p) && p.top_p > 0 && p.top_p <= 1)) {
    const std::string n = name("top_p");
    return ParamError(n, StrCat("'", n, "' must be in (0, 1]; got ", p.top_p));
  }
  // vLLM's -1 means "disabled", as 0 does.
  LOOM_RETURN_IF_ERROR(CheckInt(name("top_k"), p.top_k, -1, 1 << 20));
  LOOM_RETURN_IF_ERROR(CheckNumber(name("min_p"), p.min_p, 0, 1));
  LOOM_RETURN_IF_ERROR(CheckNumber(name("repetition_penalty"), p.repetition_penalty, 1e-3, 100));
  LOOM_RETURN_IF_ERROR(CheckNumber(name("frequency_penalty"), p.frequency_penalty, -2, 2));
  LOOM_RETURN_IF_ERROR(CheckNumber(name("presence_penalty"), p.presence_penalty, -2, 2));
  const std::string bias = name("logit_bias");
  if (static_cast<int64_t>(p.logit_bias.size()) > limits.max_logit_bias_entries) {
    return ParamError(bias, StrCat("at most ", limits.max_logit_bias_entries, " ", bias,
                                   " entries"));
  }
  for (const auto& [id, value] : p.logit_bias) {
    if (id < 0 || id >= limits.vocab_size) {
      return ParamError(bias, StrCat(bias, " key '", id, "' is not a token id in [0, ",
                                     limits.vocab_size, ")"));
    }
    if (!std::isfinite(value) || std::abs(value) > 100) {
      return ParamError(bias, StrCat(bias, " values must be numbers in [-100, 100]"));
    }
  }
  if (p.logprobs.has_value()) {
    LOOM_RETURN_IF_ERROR(CheckInt(names.logprobs, *p.logprobs, 0, kMaxLogprobs));
  }
  return absl::OkStatus();
}

absl::Status CheckStops(const CompletionParams& p, const ParseLimits& limits) {
  if (static_cast<int64_t>(p.stop.size()) > limits.max_stop_strings) {
    return ParamError("stop", StrCat("at most ", limits.max_stop_strings, " stop strings"));
  }
  for (const std::string& s : p.stop) {
    if (s.empty() || static_cast<int64_t>(s.size()) > limits.max_stop_string_bytes) {
      return ParamError("stop", StrCat("stop strings must have 1 to ", limits.max_stop_string_bytes,
                                       " bytes"));
    }
  }
  return CheckTokenIds("stop_token_ids", p.stop_token_ids, limits.vocab_size);
}

}  // namespace

bool IsValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > static_cast<size_t>(kMaxRequestIdBytes)) return false;
  for (char c : id) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

absl::Status ValidateParams(const CompletionParams& p, const ParseLimits& limits,
                            const ParamNames& names) {
  for (const PromptInput& prompt : p.prompts) {
    if (prompt.is_ids) {
      LOOM_RETURN_IF_ERROR(CheckTokenIds(names.prompt, prompt.ids, limits.vocab_size));
    }
  }
  LOOM_RETURN_IF_ERROR(CheckLength(p, names));
  LOOM_RETURN_IF_ERROR(CheckInt("n", p.n, 1, limits.max_n));
  LOOM_RETURN_IF_ERROR(CheckSampling(p, limits, names));
  LOOM_RETURN_IF_ERROR(CheckStops(p, limits));
  LOOM_RETURN_IF_ERROR(CheckInt("priority", p.priority, -1000000, 1000000));
  LOOM_RETURN_IF_ERROR(CheckNumber("timeout", p.timeout_s, 0, 86400 * 7));
  if (!p.request_id.empty() && !IsValidRequestId(p.request_id)) {
    return ParamError("request_id", StrCat("'request_id' must have 1 to ", kMaxRequestIdBytes,
                                           " visible ASCII characters (no spaces or control "
                                           "characters); got ", p.request_id.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckTokenizedPrompt(std::span<const int32_t> ids, int32_t vocab_size,
                                  std::string_view field) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return ParamError(field, StrCat("the tokenizer produced token id ", id,
                                      ", which the model's vocabulary of ", vocab_size,
                                      " tokens does not have"));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::api
