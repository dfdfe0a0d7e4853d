// ComputeLogprobs: log-softmax of raw logits, one token's rank and the most likely tokens.
//
// Four vectorised passes over the vocabulary (max, sum of exponentials, rank count, top
// selection), each O(vocab) with no sorting: the top list is kept sorted while scanning ids in
// increasing order, so a token only enters it by beating the current last entry, which breaks
// ties by lower id for free.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/common/logging.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/sampler_internal.h"

namespace loom {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

using sampling_internal::Sanitize;

// 1 + the number of tokens before `token` in the order (logit descending, id ascending).
int32_t Rank(std::span<const float> logits, int32_t token) {
  const float value = Sanitize(logits[token]);
  return 1 + sampling_internal::CountAbove(logits.first(token), value, /*or_equal=*/true) +
         sampling_internal::CountAbove(logits.subspan(token + 1), value, /*or_equal=*/false);
}

// Ids of the first `num_top` tokens in the order (logit descending, id ascending), into `top`
// (whose token_id fields it fills; logprob is left for the caller). Once the list is full, only
// a token beating its last entry can enter, and FindAbove skips to the next such token.
void SelectTop(std::span<const float> logits, int32_t num_top, std::vector<TokenLogprob>& top) {
  top.clear();
  if (num_top <= 0) return;
  top.reserve(num_top);
  const auto value_of = [&](const TokenLogprob& entry) {
    return Sanitize(logits[entry.token_id.value()]);
  };
  const size_t n = logits.size();
  for (size_t i = 0; i < n; ++i) {
    const bool full = static_cast<int32_t>(top.size()) == num_top;
    if (full) {
      i = sampling_internal::FindAbove(logits, i, value_of(top.back()));
      if (i == n) break;
      top.pop_back();
    }
    const float value = Sanitize(logits[i]);
    // After every entry whose value is >= this one (they have lower ids).
    const auto at = std::find_if(
        top.begin(), top.end(), [&](const TokenLogprob& entry) { return value_of(entry) < value; });
    top.insert(at, TokenLogprob{TokenId(static_cast<int32_t>(i)), 0.0f});
  }
}

}  // namespace

PositionLogprobs ComputeLogprobs(std::span<const float> logits, TokenId token, int32_t num_top) {
  namespace si = sampling_internal;
  const int32_t n = static_cast<int32_t>(logits.size());
  LOOM_CHECK(token.value() >= 0 && token.value() < n, "token ", token, " outside a vocabulary of ",
             n);
  const float max = std::min(si::MaxLogit(logits), std::numeric_limits<float>::max());
  // log of the normaliser; every log-probability is logit - max - log_normaliser.
  const double log_normaliser = max == -kInf ? 0.0 : std::log(si::SumExpShifted(logits, max));
  const auto logprob = [&](float logit) -> float {
    const float value = Sanitize(logit);
    if (max == -kInf || value == -kInf) return -kInf;
    return static_cast<float>(static_cast<double>(value) - max - log_normaliser);
  };

  PositionLogprobs out;
  out.token = TokenLogprob{token, logprob(logits[token.value()])};
  out.rank = Rank(logits, token.value());
  SelectTop(logits, std::min(num_top, n), out.top);
  for (TokenLogprob& entry : out.top) entry.logprob = logprob(logits[entry.token_id.value()]);
  return out;
}

}  // namespace loom
