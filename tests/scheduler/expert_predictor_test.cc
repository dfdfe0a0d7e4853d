#include "scheduler/experts/expert_predictor.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr int32_t kLayers = 8;
constexpr int32_t kExperts = 8;
constexpr int32_t kTopK = 2;
constexpr int32_t kTopics = 4;

// Topic t routes layer l's tokens mostly to two experts that move from layer to layer, so only
// the first layers of a request tell which topic it is.
std::vector<int32_t> TopicExperts(int32_t topic, int32_t layer) {
  return {(2 * topic + 3 * layer) % kExperts, (2 * topic + 1 + 3 * layer) % kExperts};
}

// `num_tokens` tokens of `topic` through layers [0, num_layers): each token goes to the topic's
// two experts, except every fourth, which takes one random expert instead of the second.
ActivationMatrix Request(int32_t topic, int32_t num_tokens, int32_t num_layers, uint32_t seed) {
  std::mt19937 rng(seed);
  ActivationMatrix m = *ActivationMatrix::Zeros(kLayers, kExperts);
  for (int32_t t = 0; t < num_tokens; ++t) {
    for (int32_t l = 0; l < num_layers; ++l) {
      const std::vector<int32_t> experts = TopicExperts(topic, l);
      EXPECT_TRUE(m.Add({l, experts[0]}).ok());
      const int32_t second = t % 4 == 3 ? static_cast<int32_t>(rng() % kExperts) : experts[1];
      EXPECT_TRUE(m.Add({l, second}).ok());
    }
  }
  return m;
}

ExpertPredictor Predictor(ExpertPredictorConfig config = {.top_k = kTopK}) {
  absl::StatusOr<ExpertPredictor> p = ExpertPredictor::Create(config);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

TraceCollection PastRequests() {
  TraceCollection c = *TraceCollection::Create(kLayers, kExperts, {.capacity = 64});
  uint32_t seed = 1;
  for (int round = 0; round < 3; ++round) {
    for (int32_t topic = 0; topic < kTopics; ++topic) {
      EXPECT_TRUE(c.Insert(Request(topic, 20, kLayers, seed++)).ok());
    }
  }
  return c;
}

// Experts of `layer`, most probable first (ties by index).
std::vector<int32_t> Ranked(const ExpertForecast& f, int32_t layer) {
  std::vector<int32_t> order(kExperts);
  for (int32_t e = 0; e < kExperts; ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return f.probability({layer, a}) > f.probability({layer, b});
  });
  return order;
}

TEST(ExpertPredictorTest, CreateValidatesTheConfig) {
  EXPECT_FALSE(ExpertPredictor::Create({.top_k = 0}).ok());
  EXPECT_FALSE(ExpertPredictor::Create({.num_matches = 0}).ok());
  EXPECT_FALSE(ExpertPredictor::Create({.similarity_power = -1.0}).ok());
  EXPECT_FALSE(ExpertPredictor::Create({.history_prior_tokens = -1.0}).ok());
}

TEST(ExpertPredictorTest, RanksTheTopicsExpertsFirstAfterAFewLayers) {
  const TraceCollection past = PastRequests();
  const ExpertPredictor predictor = Predictor();
  for (int32_t topic = 0; topic < kTopics; ++topic) {
    // The first token of a new request has run layers 0..2.
    const ActivationMatrix partial = Request(topic, 1, 3, 100 + topic);
    absl::StatusOr<std::vector<ExpertMatch>> matches = predictor.Match(partial, past);
    ASSERT_TRUE(matches.ok());
    ASSERT_FALSE(matches->empty());
    // The best match is a past request of the same topic (topics were inserted in order).
    EXPECT_EQ(static_cast<int32_t>((matches->front().entry_id - 1) % kTopics), topic);
    absl::StatusOr<ExpertForecast> f = predictor.Predict(partial, 3, past, nullptr);
    ASSERT_TRUE(f.ok()) << f.status();
    for (int32_t l = 3; l < kLayers; ++l) {
      std::vector<int32_t> top = Ranked(*f, l);
      top.resize(2);
      std::sort(top.begin(), top.end());
      std::vector<int32_t> want = TopicExperts(topic, l);
      std::sort(want.begin(), want.end());
      EXPECT_EQ(top, want) << "topic " << topic << " layer " << l;
      EXPECT_GT(f->probability({l, want[0]}), 0.6);
      EXPECT_GT(f->probability({l, want[1]}), 0.6);
    }
  }
}

TEST(ExpertPredictorTest, EmptyCollectionFallsBackToPopularityThenUniform) {
  const TraceCollection empty = *TraceCollection::Create(kLayers, kExperts, {.capacity = 4});
  const ExpertPredictor predictor = Predictor({.top_k = kTopK, .history_prior_tokens = 1e9});
  const ActivationMatrix request = *ActivationMatrix::Zeros(kLayers, kExperts);
  ActivationMatrix popularity = *ActivationMatrix::Zeros(kLayers, kExperts);
  ASSERT_TRUE(popularity.Add({5, 6}, 3).ok());
  ASSERT_TRUE(popularity.Add({5, 1}, 1).ok());
  absl::StatusOr<ExpertForecast> f = predictor.Predict(request, 0, empty, &popularity);
  ASSERT_TRUE(f.ok());
  EXPECT_NEAR(f->probability({5, 6}), 1.0, 1e-9);  // min(1, 2 * 0.75)
  EXPECT_NEAR(f->probability({5, 1}), 0.5, 1e-9);
  EXPECT_NEAR(f->probability({5, 0}), 0.0, 1e-9);
  // Layers the popularity has not seen, and no popularity at all: uniform top_k / num_experts.
  EXPECT_NEAR(f->probability({4, 3}), 0.25, 1e-9);
  f = predictor.Predict(request, 0, empty, nullptr);
  ASSERT_TRUE(f.ok());
  EXPECT_NEAR(f->probability({5, 6}), 0.25, 1e-9);
  // Another shape is refused.
  const ActivationMatrix small = *ActivationMatrix::Zeros(2, 2);
  EXPECT_FALSE(predictor.Predict(request, 0, empty, &small).ok());
  EXPECT_FALSE(predictor.Predict(small, 0, empty, nullptr).ok());
  EXPECT_FALSE(predictor.Predict(request, kLayers, empty, nullptr).ok());
}

TEST(ExpertPredictorTest, ALongRequestFollowsItsOwnHistory) {
  // The collection knows only topic 0; the request has routed 200 tokens like topic 1 (whose
  // experts differ from topic 0's in every layer), one of them at layer 0 like topic 0.
  TraceCollection past = *TraceCollection::Create(kLayers, kExperts, {.capacity = 4});
  ASSERT_TRUE(past.Insert(Request(0, 20, kLayers, 1)).ok());
  ActivationMatrix request = Request(1, 200, kLayers, 2);
  ASSERT_TRUE(request.Add({0, TopicExperts(0, 0)[0]}).ok());
  absl::StatusOr<ExpertForecast> f = Predictor().Predict(request, 2, past, nullptr);
  ASSERT_TRUE(f.ok());
  for (int32_t l = 0; l < kLayers; ++l) {
    EXPECT_GT(f->probability({l, TopicExperts(1, l)[0]}), 0.8) << l;
    EXPECT_LT(f->probability({l, TopicExperts(0, l)[1]}), 0.3) << l;
  }
}

TEST(ExpertPredictorTest, AWeakMatchBarelyCountsAgainstAStrongOne) {
  // Entry 1 is the request's own topic; entry 2 shares only layer 0 with it.
  TraceCollection past = *TraceCollection::Create(kLayers, kExperts, {.capacity = 4});
  ASSERT_TRUE(past.Insert(Request(0, 20, kLayers, 1)).ok());
  ActivationMatrix other = Request(2, 20, kLayers, 2);
  ASSERT_TRUE(other.Add({0, TopicExperts(0, 0)[0]}, 40).ok());
  ASSERT_TRUE(other.Add({0, TopicExperts(0, 0)[1]}, 40).ok());
  ASSERT_TRUE(past.Insert(other).ok());
  const ActivationMatrix partial = Request(0, 1, 2, 3);
  absl::StatusOr<ExpertForecast> sharp = Predictor().Predict(partial, 2, past, nullptr);
  absl::StatusOr<ExpertForecast> flat =
      Predictor({.top_k = kTopK, .similarity_power = 0.0}).Predict(partial, 2, past, nullptr);
  ASSERT_TRUE(sharp.ok() && flat.ok());
  const ExpertKey wrong{5, TopicExperts(2, 5)[0]};
  EXPECT_LT(sharp->probability(wrong), 0.1);
  EXPECT_GT(flat->probability(wrong), 0.3);
}

TEST(ExpertPredictorTest, LayerProximityIsCyclicAndNearerLayersWeighMore) {
  absl::StatusOr<ExpertForecast> f = ExpertForecast::Zeros(kLayers, kExperts, 5);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->LayerDistance(5), 0);
  EXPECT_EQ(f->LayerDistance(7), 2);
  EXPECT_EQ(f->LayerDistance(0), 3);  // the next token's first layer
  EXPECT_EQ(f->LayerDistance(4), 7);  // needed last
  f->set_probability({6, 1}, 0.5);
  f->set_probability({4, 1}, 0.5);
  EXPECT_GT(f->Priority({6, 1}), f->Priority({4, 1}));
  // Next use after d + L (1 - q) / q layer-steps: 1 + 8 = 9 for (6, 1), 7 + 8 = 15 for (4, 1).
  EXPECT_DOUBLE_EQ(f->ReuseDistance({6, 1}), 9.0);
  EXPECT_DOUBLE_EQ(f->ReuseDistance({4, 1}), 15.0);
  EXPECT_DOUBLE_EQ(f->Priority({6, 1}), 1.0 / 10.0);
  EXPECT_DOUBLE_EQ(f->Priority({4, 1}), 1.0 / 16.0);
  // A sure expert of the layer just run outranks an unlikely one of the next layer (its next
  // use, 7 steps away, comes before the other's expected 1 + 8 * 4 = 33).
  f->set_probability({4, 2}, 1.0);
  f->set_probability({6, 2}, 0.2);
  EXPECT_DOUBLE_EQ(f->Priority({4, 2}), 1.0 / 8.0);
  EXPECT_GT(f->Priority({4, 2}), f->Priority({6, 2}));
  // The layer about to run, surely: 1. Never used: 0 (and an infinite reuse distance).
  f->set_probability({5, 0}, 1.0);
  EXPECT_DOUBLE_EQ(f->Priority({5, 0}), 1.0);
  EXPECT_EQ(f->Priority({5, 3}), 0.0);
  EXPECT_TRUE(std::isinf(f->ReuseDistance({5, 3})));
}

TEST(ExpertPredictorTest, ABatchSumsItsRequestsForecasts) {
  ExpertForecast a = *ExpertForecast::Zeros(kLayers, kExperts, 1);
  ExpertForecast b = *ExpertForecast::Zeros(kLayers, kExperts, 1);
  a.set_probability({2, 3}, 0.75);
  a.set_probability({2, 4}, 0.75);
  b.set_probability({2, 3}, 0.5);
  b.set_probability({2, 5}, 0.9);
  ExpertForecast batch = *ExpertForecast::Zeros(kLayers, kExperts, 1);
  ASSERT_TRUE(batch.Add(a).ok());
  ASSERT_TRUE(batch.Add(b).ok());
  EXPECT_DOUBLE_EQ(batch.probability({2, 3}), 1.25);
  EXPECT_DOUBLE_EQ(batch.probability({2, 4}), 0.75);
  EXPECT_DOUBLE_EQ(batch.probability({2, 5}), 0.9);
  // The chance that any request uses it: 1 - 0.25 * 0.5.
  EXPECT_DOUBLE_EQ(batch.use_probability({2, 3}), 0.875);
  EXPECT_DOUBLE_EQ(batch.use_probability({2, 4}), 0.75);
  EXPECT_DOUBLE_EQ(batch.use_probability({2, 6}), 0.0);
  // Sum, not max: the expert both requests need outranks the one only b needs more surely.
  EXPECT_GT(batch.Priority({2, 3}), batch.Priority({2, 5}));
  EXPECT_DOUBLE_EQ(batch.Priority({2, 3}), 1.25 * 0.875 / (0.875 * 2.0 + 8.0 * 0.125));
  // Forecasts at different layers or shapes do not unite.
  EXPECT_FALSE(batch.Add(*ExpertForecast::Zeros(kLayers, kExperts, 2)).ok());
  EXPECT_FALSE(batch.Add(*ExpertForecast::Zeros(kLayers, kExperts + 1, 1)).ok());
  EXPECT_DOUBLE_EQ(batch.probability({2, 3}), 1.25);
  EXPECT_DOUBLE_EQ(batch.use_probability({2, 3}), 0.875);
  EXPECT_FALSE(ExpertForecast::Zeros(kLayers, kExperts, kLayers).ok());
  // Eight requests that each use an expert one time in eight: likely, not sure.
  ExpertForecast eight = *ExpertForecast::Zeros(kLayers, kExperts, 1);
  for (int i = 0; i < 8; ++i) eight.AddRequest({3, 0}, 0.125);
  EXPECT_DOUBLE_EQ(eight.probability({3, 0}), 1.0);
  EXPECT_NEAR(eight.use_probability({3, 0}), 1.0 - std::pow(0.875, 8), 1e-12);
}

// AddForecast builds a batch union in place: the same numbers as uniting Forecast's results,
// and a shape mismatch adds nothing.
TEST(ExpertPredictorTest, AddForecastEqualsUnitingForecasts) {
  const ExpertPredictor predictor = Predictor();
  const TraceCollection past = PastRequests();
  const ActivationMatrix a = Request(0, 3, 2, 7);
  const ActivationMatrix b = Request(1, 5, kLayers, 8);
  ExpertForecast expected = *ExpertForecast::Zeros(kLayers, kExperts, 2);
  ExpertForecast batch = *ExpertForecast::Zeros(kLayers, kExperts, 2);
  for (const ActivationMatrix* m : {&a, &b}) {
    const std::vector<ExpertMatch> matches = *predictor.Match(*m, past);
    const std::vector<double> prior = *predictor.Prior(matches, past, nullptr);
    ASSERT_TRUE(expected.Add(*predictor.Forecast(*m, prior, 2)).ok());
    ASSERT_TRUE(predictor.AddForecast(*m, prior, &batch).ok());
  }
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int32_t e = 0; e < kExperts; ++e) {
      EXPECT_DOUBLE_EQ(batch.probability({l, e}), expected.probability({l, e}));
    }
  }
  ExpertForecast other = *ExpertForecast::Zeros(kLayers, kExperts + 1, 0);
  const std::vector<double> prior(static_cast<size_t>(kLayers) * kExperts, 0.5);
  EXPECT_FALSE(predictor.AddForecast(a, prior, &other).ok());
  EXPECT_FALSE(predictor.AddForecast(a, std::vector<double>(3, 0.5), &batch).ok());
  EXPECT_DOUBLE_EQ(batch.probability({0, 0}), expected.probability({0, 0}));
}

}  // namespace
}  // namespace loom
