// The sampler's numeric building blocks: exp, the whole-vocabulary passes, the counter-based
// generator, and the partial-selection draw against a plain full-sort reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/sampling/random.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/sampler_internal.h"
#include "gtest/gtest.h"

namespace loom::sampling_internal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplerMathTest, ExpNonPositiveIsAccurate) {
  EXPECT_EQ(ExpNonPositive(0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-kInf), 0.0f);
  EXPECT_EQ(ExpNonPositive(-87.5f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-1000.0f), 0.0f);
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.000731f) {
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(ExpNonPositive(x) - exact) / exact);
  }
  EXPECT_LT(worst, 3e-7);  // ~2.5 ulp
}

// Logits of the kinds the sampler meets, vocab entries.
std::vector<float> RandomLogits(int32_t vocab_size, int kind, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> logits(vocab_size);
  const float sigma = kind == 0 ? 1.5f : kind == 1 ? 3.0f : 1.0f;
  for (float& x : logits) x = sigma * normal(rng);
  std::uniform_int_distribution<int32_t> token(0, vocab_size - 1);
  if (kind == 0) {  // peaked: a few dominant tokens
    for (int i = 0; i < 5; ++i) logits[token(rng)] += 10.0f;
  } else if (kind == 3) {  // heavy ties
    for (float& x : logits) x = std::round(x * 2.0f) / 2.0f;
  } else if (kind == 4) {  // masked padding and a NaN; token 0 stays finite
    for (int32_t i = std::max(1, vocab_size * 3 / 4); i < vocab_size; ++i) logits[i] = -kInf;
    if (vocab_size > 1) logits[1 + token(rng) % (vocab_size - 1)] = std::nanf("");
  } else if (kind == 5) {  // all equal
    std::fill(logits.begin(), logits.end(), 0.25f);
  }
  return logits;
}

TEST(SamplerMathTest, WeightsMatchDoublePrecisionSoftmax) {
  std::mt19937 rng(3);
  for (int32_t vocab_size : {1, 3, 17, 1000, 128256}) {
    for (int kind = 0; kind < 6; ++kind) {
      std::vector<float> logits = RandomLogits(vocab_size, kind, rng);
      std::vector<float> weights = logits;
      const double total = ComputeWeights(weights, 0.7f);
      double max = -INFINITY;
      for (float x : logits) {
        if (!std::isnan(x)) max = std::max(max, static_cast<double>(x));
      }
      double exact_total = 0;
      for (int32_t i = 0; i < vocab_size; ++i) {
        const float x = std::isnan(logits[i]) ? -kInf : logits[i];
        const double arg = (x - max) / 0.7;
        const double exact = std::exp(arg);
        exact_total += exact;
        // exp's own error plus the f32 rounding of its argument, relative 6e-8 of it.
        const double tolerance = exact > 0 ? std::max(exact * (3e-7 - 1.2e-7 * arg), 1e-37) : 0;
        ASSERT_NEAR(weights[i], exact, tolerance) << i;
        // Each lane agrees bit for bit with the scalar code, whatever the vector width.
        const float scale = 1.0f / 0.7f;
        ASSERT_EQ(weights[i], ExpNonPositive((x - static_cast<float>(max)) * scale)) << i;
      }
      EXPECT_NEAR(total, exact_total, 1e-6 * exact_total);
      EXPECT_EQ(*std::max_element(weights.begin(), weights.end()), 1.0f);
    }
  }
}

TEST(SamplerMathTest, MaxArgmaxAndSumExp) {
  std::mt19937 rng(5);
  for (int32_t vocab_size : {1, 15, 16, 17, 513, 40000}) {
    std::vector<float> logits = RandomLogits(vocab_size, 3, rng);
    logits[vocab_size / 2] = std::numeric_limits<float>::quiet_NaN();
    int32_t expected = -1;
    for (int32_t i = 0; i < vocab_size; ++i) {
      if (!std::isnan(logits[i]) && (expected < 0 || logits[i] > logits[expected])) expected = i;
    }
    const float max = expected < 0 ? -kInf : logits[expected];
    EXPECT_EQ(MaxLogit(logits), max);
    EXPECT_EQ(Argmax(logits), expected);
    double exact = 0;
    for (float x : logits) exact += std::isnan(x) ? 0.0 : std::exp(static_cast<double>(x) - max);
    if (expected >= 0) {
      EXPECT_NEAR(SumExpShifted(logits, max), exact, 1e-6 * exact);
    }
  }
  EXPECT_EQ(Argmax(std::vector<float>{-kInf, -kInf}), -1);
}

TEST(SamplerMathTest, CounterUniformIsUniformAndKeyed) {
  constexpr int kBuckets = 16;
  constexpr int kDraws = 160000;
  std::vector<int> buckets(kBuckets, 0);
  for (int i = 0; i < kDraws; ++i) {
    // Alternate between walking the counter and walking the seed.
    const double u = i % 2 ? CounterUniform(12345, i) : CounterUniform(i, 7);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++buckets[static_cast<int>(u * kBuckets)];
  }
  double chi2 = 0;
  const double expected = static_cast<double>(kDraws) / kBuckets;
  for (int count : buckets) chi2 += (count - expected) * (count - expected) / expected;
  EXPECT_LT(chi2, 15 + 6 * std::sqrt(30.0));
  EXPECT_EQ(CounterUniform(9, 4), CounterUniform(9, 4));
  EXPECT_NE(CounterUniform(9, 4), CounterUniform(9, 5));
  EXPECT_NE(CounterUniform(9, 4), CounterUniform(10, 4));
}

// The draw as sampler.h and draw.cc define it, over a full sort of the vocabulary.
class ReferenceDraw {
 public:
  ReferenceDraw(const std::vector<float>& w, double total)
      : w_(w), total_(total), order_(w.size()), cumulative_(w.size()) {
    std::iota(order_.begin(), order_.end(), 0);
    std::sort(order_.begin(), order_.end(),
              [&](int32_t a, int32_t b) { return w[a] != w[b] ? w[a] > w[b] : a < b; });
    double sum = 0;
    for (size_t j = 0; j < w.size(); ++j) cumulative_[j] = sum += w[order_[j]];
  }

  int32_t Draw(const SamplingParams& params, double u) const {
    const int32_t n = static_cast<int32_t>(w_.size());
    const int32_t k = params.top_k > 0 && params.top_k < n ? params.top_k : n;
    int32_t kept = k;
    if (params.min_p > 0) {
      const float cut = params.min_p * w_[order_[0]];
      int32_t above = 0;
      while (above < n && w_[order_[above]] >= cut) ++above;
      kept = std::min(kept, std::max(1, above));
    }
    if (params.top_p < 1) {
      const double mass = k < n ? cumulative_[k - 1] : total_;
      const double target = static_cast<double>(params.top_p) * mass;
      int32_t len = 1;
      while (len < kept && cumulative_[len - 1] < target) ++len;
      kept = len;
    }
    const double target = u * (kept < n ? cumulative_[kept - 1] : total_);
    int32_t last_positive = 0;
    for (int32_t j = 0; j < kept; ++j) {
      if (cumulative_[j] > target) return order_[j];
      if (w_[order_[j]] > 0) last_positive = j;
    }
    return order_[last_positive];
  }

 private:
  const std::vector<float>& w_;
  double total_;
  std::vector<int32_t> order_;
  std::vector<double> cumulative_;
};

TEST(SamplerDrawTest, PartialSelectionMatchesFullSortReference) {
  std::mt19937 rng(11);
  const float temperatures[] = {0.3f, 0.7f, 1.0f, 1.5f};
  const int32_t top_ks[] = {0, 0, 1, 5, 50, 1000, 1 << 30};
  const float top_ps[] = {1.0f, 1.0f, 0.5f, 0.9f, 0.95f, 0.999f};
  const float min_ps[] = {0.0f, 0.0f, 0.01f, 0.1f, 0.9f};
  SamplerScratch scratch;  // shared across cases, as on a worker thread
  int num_cases = 0;
  for (int32_t vocab_size : {1, 2, 7, 100, 1000, 32000, 128256, 151936}) {
    const int num_trials = vocab_size >= 32000 ? 12 : 60;
    for (int trial = 0; trial < num_trials; ++trial) {
      std::vector<float> weights = RandomLogits(vocab_size, trial % 6, rng);
      const float temperature = temperatures[rng() % 4];
      const double total = ComputeWeights(weights, temperature);
      ASSERT_GT(total, 0);
      const ReferenceDraw reference(weights, total);
      for (int combination = 0; combination < 4; ++combination) {
        SamplingParams params;
        params.temperature = temperature;
        params.top_k = top_ks[rng() % 7];
        params.top_p = top_ps[rng() % 6];
        params.min_p = min_ps[rng() % 5];
        // Draws near 1 make the partial path sort deepest.
        for (double u : {std::uniform_real_distribution<double>(0, 1)(rng), 0.0, 0.999999}) {
          ASSERT_EQ(DrawFromWeights(weights, total, params, u, scratch), reference.Draw(params, u))
              << "vocab " << vocab_size << " kind " << trial % 6 << " T " << temperature
              << " top_k " << params.top_k << " top_p " << params.top_p << " min_p " << params.min_p
              << " u " << u;
          ++num_cases;
        }
      }
    }
  }
  EXPECT_GT(num_cases, 4000);
}

TEST(SamplerDrawTest, SampleIsTheReferenceDrawOfTheProcessedLogits) {
  std::mt19937 rng(13);
  SamplerScratch scratch;
  for (int trial = 0; trial < 60; ++trial) {
    const int32_t vocab_size = trial % 3 == 0 ? 50000 : 300;
    const std::vector<float> logits = RandomLogits(vocab_size, trial % 5, rng);
    SamplingParams params;
    params.temperature = 0.8f;
    params.top_p = trial % 2 ? 0.9f : 1.0f;
    params.top_k = trial % 4 == 1 ? 20 : 0;
    params.repetition_penalty = 1.2f;
    params.frequency_penalty = 0.4f;
    params.logit_bias = {{TokenId(3), 2.0f}};
    params.seed = 1000 + trial;
    std::vector<TokenId> prompt, output;
    for (int i = 0; i < 40; ++i) prompt.push_back(TokenId(static_cast<int32_t>(rng() % 64)));
    for (int i = 0; i < trial; ++i) output.push_back(TokenId(static_cast<int32_t>(rng() % 64)));
    const SamplerInput input{&params, prompt, output};

    std::vector<float> expected_weights = logits;
    SamplerScratch reference_scratch;
    ApplyLogitProcessors(expected_weights, input, reference_scratch);
    const double total = ComputeWeights(expected_weights, params.temperature);
    const int32_t expected =
        ReferenceDraw(expected_weights, total).Draw(params, CounterUniform(params.seed, trial));

    std::vector<float> work = logits;
    EXPECT_EQ(Sample(work, input, scratch).token_id.value(), expected) << "trial " << trial;
  }
}

}  // namespace
}  // namespace loom::sampling_internal
