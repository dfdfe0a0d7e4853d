// Sample: greedy, each truncation filter's support and frequencies, determinism, penalties,
// logit bias, min_tokens, log-probabilities through Sample, and the edge cases of sampler.h.
#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "engine/sampling/sampler_internal.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<TokenId> Ids(std::initializer_list<int32_t> values) {
  std::vector<TokenId> ids;
  for (int32_t v : values) ids.push_back(TokenId(v));
  return ids;
}

int32_t SampleOnce(std::vector<float> logits, const SamplingParams& params,
                   std::span<const TokenId> output = {}, std::span<const TokenId> prompt = {}) {
  SamplerScratch scratch;
  return Sample(logits, SamplerInput{&params, prompt, output}, scratch).token_id.value();
}

// Counts of the tokens drawn with seeds 0..num_draws-1.
std::vector<int64_t> DrawCounts(const std::vector<float>& logits, SamplingParams params,
                                int num_draws) {
  std::vector<int64_t> counts(logits.size(), 0);
  SamplerScratch scratch;
  std::vector<float> work;
  for (int i = 0; i < num_draws; ++i) {
    params.seed = static_cast<uint64_t>(i);
    work = logits;
    const int32_t token = Sample(work, SamplerInput{&params, {}, {}}, scratch).token_id.value();
    EXPECT_GE(token, 0);
    EXPECT_LT(token, static_cast<int32_t>(logits.size()));
    if (token >= 0 && token < static_cast<int32_t>(logits.size())) ++counts[token];
  }
  return counts;
}

// Checks that `counts` has no draw where `expected` is 0 and fits `expected` (probabilities,
// summing to 1) by a chi-square statistic within ~6 standard deviations of its mean.
void ExpectFrequencies(const std::vector<int64_t>& counts, const std::vector<double>& expected) {
  ASSERT_EQ(counts.size(), expected.size());
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  double chi2 = 0;
  int df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the allowed set";
      continue;
    }
    const double e = expected[i] * static_cast<double>(total);
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  if (df > 0) {
    EXPECT_LT(chi2, df + 6.0 * std::sqrt(2.0 * df)) << "df " << df;
  }
}

// Probabilities of softmax(logits / temperature) restricted to `keep` and renormalised.
std::vector<double> Renormalised(const std::vector<float>& logits, double temperature,
                                 const std::vector<bool>& keep) {
  double max = -INFINITY;
  for (float x : logits) max = std::max(max, static_cast<double>(x));
  std::vector<double> p(logits.size(), 0.0);
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (keep[i]) sum += p[i] = std::exp((logits[i] - max) / temperature);
  }
  for (double& v : p) v /= sum;
  return p;
}

// Logits whose softmax is exactly proportional to `probs`.
std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

TEST(SamplerTest, GreedyIsFirstArgmax) {
  std::mt19937 rng(1);
  SamplingParams params;
  params.temperature = 0;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(1 + trial * 37);
    std::uniform_int_distribution<int> value(-20, 20);  // integers: many ties
    for (float& x : logits) x = static_cast<float>(value(rng));
    const int32_t expected =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(SampleOnce(logits, params), expected) << "trial " << trial;
  }
}

TEST(SamplerTest, GreedyTreatsNanAsMinusInfinity) {
  SamplingParams params;
  params.temperature = 0;
  EXPECT_EQ(SampleOnce({kNaN, 1.0f, kNaN, 2.0f, kNaN}, params), 3);
  EXPECT_EQ(SampleOnce({kNaN, -kInf, 0.0f}, params), 2);
  EXPECT_EQ(SampleOnce({kNaN, kNaN, kNaN}, params), 0);  // nothing finite: lowest id
  EXPECT_EQ(SampleOnce({1.0f, kInf, kInf}, params), 1);
}

TEST(SamplerTest, TemperatureMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 2.0f};
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    ExpectFrequencies(DrawCounts(logits, params, 20000),
                      Renormalised(logits, temperature, std::vector<bool>(6, true)));
  }
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f, 1.9f, 0.0f, -3.0f, 1.0f};
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 3;
  ExpectFrequencies(
      DrawCounts(logits, params, 20000),
      Renormalised(logits, 1.0, {false, true, false, true, true, false, false, false}));
}

TEST(SamplerTest, TopPKeepsTheShortestPrefixReachingP) {
  // Sorted: 0.5 (id 2), 0.25 (id 0), 0.15 (id 3), 0.1 (id 1). Cumulative 0.5, 0.75, 0.9, 1.
  const std::vector<float> logits = LogitsFor({0.25, 0.1, 0.5, 0.15});
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = 0.8f;
  ExpectFrequencies(DrawCounts(logits, params, 20000),
                    Renormalised(logits, 1.0, {true, false, true, true}));
  params.top_p = 0.3f;  // the first token alone reaches it
  ExpectFrequencies(DrawCounts(logits, params, 2000),
                    Renormalised(logits, 1.0, {false, false, true, false}));
}

TEST(SamplerTest, TopPActsOnTheTopKRenormalisedDistribution) {
  // After top-k 2: 0.5 / 0.75 = 0.667 and 0.333, so top-p 0.6 keeps one token (on the raw
  // distribution 0.5 < 0.6 would have kept two).
  const std::vector<float> logits = LogitsFor({0.25, 0.1, 0.5, 0.15});
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 2;
  params.top_p = 0.6f;
  ExpectFrequencies(DrawCounts(logits, params, 2000),
                    Renormalised(logits, 1.0, {false, false, true, false}));
}

TEST(SamplerTest, MinPDropsTokensBelowTheScaledMax) {
  const std::vector<float> logits = LogitsFor({0.25, 0.1, 0.5, 0.15});
  SamplingParams params;
  params.temperature = 1.0f;
  params.min_p = 0.25f;  // cut at 0.125: 0.1 goes
  ExpectFrequencies(DrawCounts(logits, params, 20000),
                    Renormalised(logits, 1.0, {true, false, true, true}));
}

TEST(SamplerTest, TemperatureAppliesBeforeTheFilters) {
  // At temperature 0.5 the probabilities become 0.25^2 : 0.1^2 : 0.5^2 : 0.15^2, i.e.
  // 0.181, 0.029, 0.725, 0.065: top-p 0.9 keeps ids 2 and 0 (cumulative 0.906).
  const std::vector<float> logits = LogitsFor({0.25, 0.1, 0.5, 0.15});
  SamplingParams params;
  params.temperature = 0.5f;
  params.top_p = 0.9f;
  ExpectFrequencies(DrawCounts(logits, params, 20000),
                    Renormalised(logits, 0.5, {true, false, true, false}));
}

TEST(SamplerTest, DrawDependsOnlyOnSeedAndIndex) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(5000);
  for (float& x : logits) x = normal(rng);
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = 0.95f;
  params.seed = 42;
  const std::vector<TokenId> output_a = Ids({1, 2, 3});
  const std::vector<TokenId> output_b = Ids({7, 7, 9});
  const int32_t token = SampleOnce(logits, params, output_a);

  // Same seed and index: same token with a fresh scratch, a reused scratch, other outputs of
  // the same length (no penalties), and on another thread.
  SamplerScratch dirty;
  SamplingParams other = params;
  other.repetition_penalty = 1.3f;
  other.min_tokens = 5;
  other.min_tokens_banned_ids = Ids({0, 1});
  other.top_k = 10;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> big(150000, 0.5f);
    Sample(big, SamplerInput{&other, output_b, output_a}, dirty);
  }
  std::vector<float> work = logits;
  EXPECT_EQ(Sample(work, SamplerInput{&params, {}, output_a}, dirty).token_id.value(), token);
  EXPECT_EQ(SampleOnce(logits, params, output_b), token);
  int32_t threaded = -1;
  std::thread([&] { threaded = SampleOnce(logits, params, output_a); }).join();
  EXPECT_EQ(threaded, token);

  // Other seeds and other indices give other draws.
  std::vector<int32_t> by_seed, by_index;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    SamplingParams p = params;
    p.seed = seed;
    by_seed.push_back(SampleOnce(logits, p, output_a));
  }
  for (int32_t len = 0; len < 20; ++len) {
    std::vector<TokenId> output(len, TokenId(0));
    by_index.push_back(SampleOnce(logits, params, output));
  }
  std::sort(by_seed.begin(), by_seed.end());
  std::sort(by_index.begin(), by_index.end());
  EXPECT_GT(std::unique(by_seed.begin(), by_seed.end()) - by_seed.begin(), 10);
  EXPECT_GT(std::unique(by_index.begin(), by_index.end()) - by_index.begin(), 10);
}

// The processed logits (steps 2-4) for a request.
std::vector<float> Processed(std::vector<float> logits, const SamplingParams& params,
                             std::span<const TokenId> prompt, std::span<const TokenId> output) {
  SamplerScratch scratch;
  sampling_internal::ApplyLogitProcessors(logits, SamplerInput{&params, prompt, output}, scratch);
  // The scratch is clean again: counts and flags all zero.
  for (int32_t c : scratch.counts) EXPECT_EQ(c, 0);
  for (uint8_t f : scratch.flags) EXPECT_EQ(f, 0);
  return logits;
}

TEST(SamplerTest, PenaltiesFollowHuggingFaceAndOpenAiFormulas) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  const std::vector<TokenId> prompt = Ids({0, 1, 0, 0});
  const std::vector<TokenId> output = Ids({1, 3, 3});
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  // 0: prompt only, 2 / 2. 1: prompt and output once, -1 * 2 - 0.5 - 0.25.
  // 2: untouched. 3: output twice, 3 / 2 - 0.5 * 2 - 0.25. 4: untouched.
  EXPECT_EQ(Processed(logits, params, prompt, output),
            (std::vector<float>{1.0f, -2.75f, 0.5f, 0.25f, -2.0f}));

  SamplingParams repetition_only;
  repetition_only.repetition_penalty = 0.5f;  // < 1 encourages repeats
  EXPECT_EQ(Processed(logits, repetition_only, prompt, output),
            (std::vector<float>{4.0f, -0.5f, 0.5f, 6.0f, -2.0f}));

  SamplingParams additive_only;  // ignores the prompt
  additive_only.frequency_penalty = -1.0f;
  additive_only.presence_penalty = 1.5f;
  EXPECT_EQ(Processed(logits, additive_only, prompt, output),
            (std::vector<float>{2.0f, -1.5f, 0.5f, 3.5f, -2.0f}));

  SamplingParams none;  // neutral values: nothing changes
  EXPECT_EQ(Processed(logits, none, prompt, output), logits);
}

TEST(SamplerTest, PenaltiesChangeTheGreedyChoice) {
  SamplingParams params;
  params.temperature = 0;
  params.presence_penalty = 1.0f;
  const std::vector<float> logits = {0.0f, 2.0f, 1.5f};
  EXPECT_EQ(SampleOnce(logits, params, Ids({})), 1);
  EXPECT_EQ(SampleOnce(logits, params, Ids({1})), 2);
}

TEST(SamplerTest, LogitBiasIsAddedPerEntry) {
  SamplingParams params;
  params.logit_bias = {{TokenId(1), 1.5f}, {TokenId(3), -4.0f}, {TokenId(1), 0.25f}};
  EXPECT_EQ(Processed({0.0f, 1.0f, 2.0f, 3.0f}, params, {}, {}),
            (std::vector<float>{0.0f, 2.75f, 2.0f, -1.0f}));
  params.temperature = 0;
  EXPECT_EQ(SampleOnce({0.0f, 1.0f, 2.0f, 3.0f}, params), 1);
}

TEST(SamplerTest, MinTokensBansUntilEnoughOutput) {
  SamplingParams params;
  params.temperature = 0;
  params.min_tokens = 2;
  params.min_tokens_banned_ids = Ids({3, 0});
  const std::vector<float> logits = {5.0f, 1.0f, 2.0f, 9.0f};
  EXPECT_EQ(SampleOnce(logits, params, Ids({})), 2);
  EXPECT_EQ(SampleOnce(logits, params, Ids({1})), 2);
  EXPECT_EQ(SampleOnce(logits, params, Ids({1, 1})), 3);  // index 2 == min_tokens: lifted
  params.temperature = 1.0f;  // sampling never draws a banned token either
  for (uint64_t seed = 0; seed < 200; ++seed) {
    params.seed = seed;
    const int32_t token = SampleOnce(logits, params, Ids({1}));
    EXPECT_TRUE(token == 1 || token == 2) << token;
  }
}

TEST(SamplerTest, FallbackWhenNothingFiniteRemains) {
  SamplingParams params;
  params.min_tokens = 1;
  params.min_tokens_banned_ids = Ids({1});
  for (float temperature : {0.0f, 1.0f}) {
    params.temperature = temperature;
    // Only the banned token is finite: the allowed raw logits are all -inf -> lowest allowed id.
    EXPECT_EQ(SampleOnce({-kInf, 5.0f, kNaN}, params), 0);
    // Bias drives the allowed tokens to -inf: the best allowed raw logit wins.
    SamplingParams biased = params;
    biased.logit_bias = {{TokenId(0), -std::numeric_limits<float>::max()},
                         {TokenId(2), -std::numeric_limits<float>::max()}};
    EXPECT_EQ(SampleOnce({-1e38f, 5.0f, -0.9e38f}, biased), 2);
    // Every token banned: the ban is ignored for the fallback.
    SamplingParams all_banned = params;
    all_banned.min_tokens_banned_ids = Ids({0});
    EXPECT_EQ(SampleOnce({3.0f}, all_banned), 0);
  }
}

TEST(SamplerTest, NanLogitsAreNeverSampled) {
  std::vector<float> logits = {kNaN, 0.0f, kNaN, 0.5f, kNaN, kInf * 0.0f};
  SamplingParams params;
  params.temperature = 1.5f;
  const std::vector<int64_t> counts = DrawCounts(logits, params, 2000);
  EXPECT_EQ(counts[0] + counts[2] + counts[4] + counts[5], 0);
  EXPECT_EQ(counts[1] + counts[3], 2000);
  EXPECT_EQ(SampleOnce({kNaN, kNaN}, params), 0);
}

TEST(SamplerTest, InfiniteLogitsAreTheLikeliest) {
  SamplingParams params;
  params.temperature = 1.0f;
  const std::vector<int64_t> counts = DrawCounts({0.0f, kInf, 1.0f, kInf}, params, 1000);
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_GT(counts[1], 300);
  EXPECT_GT(counts[3], 300);
}

TEST(SamplerTest, SizeEdgeCases) {
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 1000;  // larger than the vocabulary: keeps all
  EXPECT_EQ(SampleOnce({0.3f}, params), 0);
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f};
  ExpectFrequencies(DrawCounts(logits, params, 10000),
                    Renormalised(logits, 0.8, {true, true, true}));
  params.top_k = 1;
  ExpectFrequencies(DrawCounts(logits, params, 100), {0.0, 1.0, 0.0});
}

TEST(SamplerTest, ExtremeTemperatures) {
  const std::vector<float> logits = {0.0f, 1.0f, 0.999f, -5.0f};
  SamplingParams params;
  params.temperature = 1e-30f;  // far below any gap: greedy
  ExpectFrequencies(DrawCounts(logits, params, 200), {0.0, 1.0, 0.0, 0.0});
  params.temperature = std::numeric_limits<float>::denorm_min();
  ExpectFrequencies(DrawCounts(logits, params, 200), {0.0, 1.0, 0.0, 0.0});
  params.temperature = 1e30f;  // uniform
  ExpectFrequencies(DrawCounts(logits, params, 8000), {0.25, 0.25, 0.25, 0.25});
}

TEST(SamplerTest, LogprobsComeFromTheRawLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  SamplingParams params;
  params.temperature = 0;
  params.logprobs = 2;
  params.logit_bias = {{TokenId(0), 10.0f}};
  SamplerScratch scratch;
  std::vector<float> work = logits;
  const SampleResult result = Sample(work, SamplerInput{&params, {}, {}}, scratch);
  ASSERT_EQ(result.token_id.value(), 0);
  ASSERT_TRUE(result.logprobs.has_value());
  const double log_z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  EXPECT_NEAR(result.logprobs->token.logprob, 1.0 - log_z, 1e-5);
  EXPECT_EQ(result.logprobs->rank, 4);
  ASSERT_EQ(result.logprobs->top.size(), 2u);
  EXPECT_EQ(result.logprobs->top[0].token_id.value(), 1);  // tie with 3: lower id first
  EXPECT_EQ(result.logprobs->top[1].token_id.value(), 3);
  EXPECT_NEAR(result.logprobs->top[0].logprob, 3.0 - log_z, 1e-5);

  params.logprobs = -1;
  work = logits;
  EXPECT_FALSE(Sample(work, SamplerInput{&params, {}, {}}, scratch).logprobs.has_value());
  params.logprobs = 0;
  work = logits;
  const SampleResult only_token = Sample(work, SamplerInput{&params, {}, {}}, scratch);
  ASSERT_TRUE(only_token.logprobs.has_value());
  EXPECT_TRUE(only_token.logprobs->top.empty());
}

}  // namespace
}  // namespace loom
