// Sample: the order of steps (sampler.h), the logit processors (steps 2-4) and the fallback.
//
// The processors touch only the tokens named by the request (bias, ban list, prompt and output
// tokens), so they cost O(prompt + output + bias + bans) per call. Distinct tokens are found
// with per-vocabulary counts and flags kept in the scratch and reset through the list of
// entries set, never by clearing the whole array.
#include "engine/sampling/sampler.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "engine/common/logging.h"
#include "engine/sampling/random.h"
#include "engine/sampling/sampler_internal.h"

namespace loom {
namespace sampling_internal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Bits of SamplerScratch::flags.
constexpr uint8_t kTouched = 1;    // listed in scratch.touched
constexpr uint8_t kSaved = 2;      // raw logit saved in scratch.saved_raw
constexpr uint8_t kPenalised = 4;  // repetition/frequency/presence already applied

// The processors' view of one call: logits plus the scratch's per-token state.
class TokenState {
 public:
  TokenState(std::span<float> logits, SamplerScratch& scratch)
      : logits_(logits), scratch_(scratch) {
    const size_t vocab_size = logits.size();
    if (scratch.counts.size() < vocab_size) {
      scratch.counts.resize(vocab_size, 0);
      scratch.flags.resize(vocab_size, 0);
    }
    scratch.touched.clear();
    scratch.saved_raw.clear();
  }
  // Clears every count and flag this call set.
  ~TokenState() {
    for (int32_t token : scratch_.touched) {
      scratch_.counts[token] = 0;
      scratch_.flags[token] = 0;
    }
    scratch_.touched.clear();
  }

  bool InVocab(TokenId token) const {
    return token.value() >= 0 && static_cast<size_t>(token.value()) < logits_.size();
  }
  // The logit of an in-vocabulary token, saving its raw value before the first change.
  float& MutableLogit(int32_t token) {
    Touch(token);
    if (!(scratch_.flags[token] & kSaved)) {
      scratch_.flags[token] |= kSaved;
      scratch_.saved_raw.emplace_back(token, logits_[token]);
    }
    return logits_[token];
  }
  int32_t& Count(int32_t token) {
    Touch(token);
    return scratch_.counts[token];
  }
  // True the first time it is called for `token` in this call.
  bool FirstPenalty(int32_t token) {
    Touch(token);
    if (scratch_.flags[token] & kPenalised) return false;
    scratch_.flags[token] |= kPenalised;
    return true;
  }

 private:
  void Touch(int32_t token) {
    if (!(scratch_.flags[token] & kTouched)) {
      scratch_.flags[token] |= kTouched;
      scratch_.touched.push_back(token);
    }
  }

  std::span<float> logits_;
  SamplerScratch& scratch_;
};

bool MinTokensBanActive(const SamplerInput& input) {
  const SamplingParams& params = *input.params;
  return input.output_token_ids.size() < static_cast<size_t>(std::max(params.min_tokens, 0)) &&
         !params.min_tokens_banned_ids.empty();
}

// Hugging Face repetition penalty on one logit.
float RepetitionPenalty(float logit, float penalty) {
  return logit > 0 ? logit / penalty : logit * penalty;
}

void ApplyPenalties(const SamplerInput& input, TokenState& state) {
  const SamplingParams& params = *input.params;
  const bool repetition = params.repetition_penalty != 1.0f;
  const bool additive = params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  if (!repetition && !additive) return;
  if (additive) {
    for (TokenId token : input.output_token_ids) {
      if (state.InVocab(token)) ++state.Count(token.value());
    }
  }
  for (TokenId token : input.output_token_ids) {
    if (!state.InVocab(token) || !state.FirstPenalty(token.value())) continue;
    float& logit = state.MutableLogit(token.value());
    if (repetition) logit = RepetitionPenalty(logit, params.repetition_penalty);
    if (additive) {
      const int32_t count = state.Count(token.value());
      logit -= params.frequency_penalty * static_cast<float>(count) + params.presence_penalty;
    }
  }
  if (!repetition) return;
  for (TokenId token : input.prompt_token_ids) {
    if (!state.InVocab(token) || !state.FirstPenalty(token.value())) continue;
    float& logit = state.MutableLogit(token.value());
    logit = RepetitionPenalty(logit, params.repetition_penalty);
  }
}

// A raw logit as the fallback compares it: NaN as -inf, +inf as the largest finite float.
float RawValue(float x) {
  if (x != x) return -kInf;
  return std::min(x, std::numeric_limits<float>::max());
}

}  // namespace

void ApplyLogitProcessors(std::span<float> logits, const SamplerInput& input,
                          SamplerScratch& scratch) {
  const SamplingParams& params = *input.params;
  TokenState state(logits, scratch);
  for (const auto& [token, bias] : params.logit_bias) {
    if (state.InVocab(token)) state.MutableLogit(token.value()) += bias;
  }
  if (MinTokensBanActive(input)) {
    for (TokenId token : params.min_tokens_banned_ids) {
      if (state.InVocab(token)) state.MutableLogit(token.value()) = -kInf;
    }
  }
  ApplyPenalties(input, state);
}

int32_t FallbackToken(int32_t vocab_size, const SamplerInput& input,
                      const SamplerScratch& scratch) {
  // Tokens the ban allows, as a sorted list of banned ids (this path is rare; it may allocate).
  std::vector<int32_t> banned;
  if (MinTokensBanActive(input)) {
    for (TokenId token : input.params->min_tokens_banned_ids) {
      if (token.value() >= 0 && token.value() < vocab_size) banned.push_back(token.value());
    }
    std::sort(banned.begin(), banned.end());
    banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
    if (banned.size() == static_cast<size_t>(vocab_size)) banned.clear();  // bans everything
  }
  const auto allowed = [&](int32_t token) {
    return !std::binary_search(banned.begin(), banned.end(), token);
  };
  // Every token outside saved_raw kept its raw logit, which is therefore -inf or NaN.
  int32_t best = -1;
  float best_value = -kInf;
  for (const auto& [token, raw] : scratch.saved_raw) {
    const float value = RawValue(raw);
    if (!allowed(token) || value == -kInf) continue;
    if (best < 0 || value > best_value || (value == best_value && token < best)) {
      best = token;
      best_value = value;
    }
  }
  if (best >= 0) return best;
  for (int32_t token = 0; token < vocab_size; ++token) {
    if (allowed(token)) return token;
  }
  return 0;  // unreachable: `banned` never holds every token
}

}  // namespace sampling_internal

SampleResult Sample(std::span<float> logits, const SamplerInput& input, SamplerScratch& scratch) {
  namespace si = sampling_internal;
  LOOM_CHECK(input.params != nullptr, "Sample needs sampling params");
  LOOM_CHECK(
      !logits.empty() && logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
      "Sample needs 1 to 2^31-1 logits, got ", logits.size());
  const SamplingParams& params = *input.params;
  const int32_t vocab_size = static_cast<int32_t>(logits.size());
  if (params.logprobs >= 0) scratch.raw_logits.assign(logits.begin(), logits.end());

  si::ApplyLogitProcessors(logits, input, scratch);
  int32_t token = -1;
  if (params.greedy()) {
    token = si::Argmax(logits);
  } else {
    const double total = si::ComputeWeights(logits, params.temperature);
    if (total > 0) {
      const double u = si::CounterUniform(params.seed, input.output_token_ids.size());
      token = si::DrawFromWeights(logits, total, params, u, scratch);
    }
  }
  if (token < 0) token = si::FallbackToken(vocab_size, input, scratch);

  SampleResult result;
  result.token_id = TokenId(token);
  if (params.logprobs >= 0) {
    result.logprobs = ComputeLogprobs(scratch.raw_logits, result.token_id, params.logprobs);
  }
  return result;
}

}  // namespace loom
