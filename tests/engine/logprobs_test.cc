// ComputeLogprobs against a double-precision log-softmax and a full sort.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Token ids ordered by logit descending, ties by lower id (NaN as -inf).
std::vector<int32_t> ReferenceOrder(const std::vector<float>& logits) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto value = [&](int32_t i) { return std::isnan(logits[i]) ? -kInf : logits[i]; };
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return value(a) > value(b); });
  return order;
}

std::vector<double> ReferenceLogSoftmax(const std::vector<float>& logits) {
  double max = -INFINITY;
  for (float x : logits) {
    if (!std::isnan(x)) max = std::max(max, static_cast<double>(x));
  }
  double sum = 0;
  for (float x : logits) sum += std::isnan(x) ? 0.0 : std::exp(x - max);
  std::vector<double> out;
  for (float x : logits) out.push_back(std::isnan(x) ? -INFINITY : x - max - std::log(sum));
  return out;
}

TEST(LogprobsTest, MatchDoublePrecisionLogSoftmaxRanksAndTop) {
  std::mt19937 rng(17);
  for (int32_t vocab_size : {1, 2, 5, 64, 1000, 32000, 128256}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::normal_distribution<float> normal(0.0f, trial < 3 ? 3.0f : 8.0f);
      std::vector<float> logits(vocab_size);
      for (float& x : logits) x = normal(rng);
      if (trial % 2) {  // ties, masked entries and a NaN
        for (float& x : logits) x = std::round(x);
        for (int32_t i = 0; i < vocab_size / 10; ++i) logits[rng() % vocab_size] = -kInf;
        logits[rng() % vocab_size] = std::numeric_limits<float>::quiet_NaN();
      }
      const std::vector<double> expected = ReferenceLogSoftmax(logits);
      const std::vector<int32_t> order = ReferenceOrder(logits);
      const int32_t num_top = std::min<int32_t>(vocab_size, 1 + trial * 4);
      for (int32_t pick : {0, vocab_size / 2, vocab_size - 1, order[0]}) {
        const PositionLogprobs out = ComputeLogprobs(logits, TokenId(pick), num_top);
        EXPECT_EQ(out.token.token_id.value(), pick);
        if (std::isinf(expected[pick])) {
          EXPECT_EQ(out.token.logprob, -kInf);
        } else {
          EXPECT_NEAR(out.token.logprob, expected[pick], 1e-5);
        }
        const int32_t rank =
            static_cast<int32_t>(std::find(order.begin(), order.end(), pick) - order.begin()) + 1;
        EXPECT_EQ(out.rank, rank) << "vocab " << vocab_size << " token " << pick;
        ASSERT_EQ(out.top.size(), static_cast<size_t>(num_top));
        for (int32_t j = 0; j < num_top; ++j) {
          EXPECT_EQ(out.top[j].token_id.value(), order[j]) << "position " << j;
          if (!std::isinf(expected[order[j]])) {
            EXPECT_NEAR(out.top[j].logprob, expected[order[j]], 1e-5);
          }
        }
      }
    }
  }
}

TEST(LogprobsTest, EdgeCases) {
  // More requested than the vocabulary holds.
  const PositionLogprobs small = ComputeLogprobs(std::vector<float>{0.0f, 0.0f}, TokenId(1), 20);
  ASSERT_EQ(small.top.size(), 2u);
  EXPECT_EQ(small.rank, 2);
  EXPECT_NEAR(small.token.logprob, std::log(0.5), 1e-6);
  EXPECT_TRUE(ComputeLogprobs(std::vector<float>{1.0f}, TokenId(0), 0).top.empty());
  EXPECT_EQ(ComputeLogprobs(std::vector<float>{1.0f}, TokenId(0), 0).token.logprob, 0.0f);

  // +inf is the largest finite value: two of them share the mass.
  const PositionLogprobs inf = ComputeLogprobs(std::vector<float>{kInf, 3.0f, kInf}, TokenId(2), 1);
  EXPECT_NEAR(inf.token.logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(inf.rank, 2);
  EXPECT_EQ(inf.top[0].token_id.value(), 0);

  // Nothing finite: every log-probability is -inf, the order is by id.
  const PositionLogprobs none =
      ComputeLogprobs(std::vector<float>{-kInf, std::nanf(""), -kInf}, TokenId(1), 3);
  EXPECT_EQ(none.token.logprob, -kInf);
  EXPECT_EQ(none.rank, 2);
  EXPECT_EQ(none.top[2].token_id.value(), 2);
}

}  // namespace
}  // namespace loom
