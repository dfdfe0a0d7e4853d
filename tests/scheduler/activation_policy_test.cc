#include "scheduler/experts/activation_policy.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr int32_t kLayers = 8;
constexpr int32_t kExperts = 4;

std::unique_ptr<ExpertCachePolicy> Activation(int32_t capacity, bool prefetch = true) {
  absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> p = ExpertCachePolicy::Create(
      "activation", {.num_layers = kLayers,
                     .num_experts = kExperts,
                     .capacity_slots = capacity,
                     .enable_prefetch = prefetch,
                     .min_prefetch_probability = 0.2,
                     .prefetch_lookahead_layers = 4});
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

ExpertForecast Forecast(int32_t current_layer,
                        const std::vector<std::pair<ExpertKey, double>>& probabilities) {
  ExpertForecast f = *ExpertForecast::Zeros(kLayers, kExperts, current_layer);
  for (const auto& [key, p] : probabilities) f.set_probability(key, p);
  return f;
}

ExpertKey Evicted(ExpertCachePolicy& p, ExpertKey key) {
  absl::StatusOr<ExpertAccess> a = p.Access(key);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() && a->evicted.has_value() ? *a->evicted : ExpertKey{-1, -1};
}

TEST(ActivationPolicyTest, WithoutAForecastItIsLru) {
  std::unique_ptr<ExpertCachePolicy> p = Activation(2);
  Evicted(*p, {0, 0});
  Evicted(*p, {0, 1});
  Evicted(*p, {0, 0});
  EXPECT_EQ(Evicted(*p, {1, 0}), (ExpertKey{0, 1}));
}

TEST(ActivationPolicyTest, EvictsTheLowestPredictedUseNotTheOldest) {
  std::unique_ptr<ExpertCachePolicy> p = Activation(3);
  Evicted(*p, {1, 0});
  Evicted(*p, {2, 0});
  Evicted(*p, {3, 0});
  // Current layer 1. (3, 0) is likelier (0.9 * 7/9 = 0.7) than (2, 0) (0.5 * 8/9 = 0.44);
  // (1, 0) is the oldest but is about to run.
  ASSERT_TRUE(p->SetForecast(Forecast(1, {{{1, 0}, 0.6}, {{2, 0}, 0.5}, {{3, 0}, 0.9}})).ok());
  EXPECT_EQ(Evicted(*p, {1, 1}), (ExpertKey{2, 0}));
  // Proximity matters: the same probability at a farther layer counts less. Layer 0 is the
  // next token's, 7 layers away: (0, 2) at 1.0 weighs 2/9, under (1, 1) at 0.3.
  ASSERT_TRUE(
      p->SetForecast(Forecast(1, {{{1, 0}, 0.6}, {{1, 1}, 0.3}, {{3, 0}, 0.9}, {{0, 2}, 1.0}}))
          .ok());
  Evicted(*p, {1, 1});  // hit
  EXPECT_EQ(Evicted(*p, {0, 2}), (ExpertKey{1, 1}));
  EXPECT_EQ(Evicted(*p, {5, 3}), (ExpertKey{0, 2}));
}

TEST(ActivationPolicyTest, TiesGoToTheFarthestLayer) {
  std::unique_ptr<ExpertCachePolicy> p = Activation(3);
  // No predicted use for any of them; current layer 4: layer 3 is 7 layers away (the next
  // token's), layer 6 two, layer 5 one. Layer 3 goes first although it is the most recent.
  Evicted(*p, {5, 1});
  Evicted(*p, {6, 1});
  Evicted(*p, {3, 1});
  ASSERT_TRUE(p->SetForecast(Forecast(4, {})).ok());
  EXPECT_EQ(Evicted(*p, {4, 0}), (ExpertKey{3, 1}));
  EXPECT_EQ(Evicted(*p, {4, 2}), (ExpertKey{6, 1}));
}

TEST(ActivationPolicyTest, PrefetchesMostUrgentFirstWithinTheLookahead) {
  std::unique_ptr<ExpertCachePolicy> p = Activation(4);
  // Current layer 2. Priority q / (q (1 + d) + 8 (1 - q)) at distance d:
  ASSERT_TRUE(p->SetForecast(Forecast(2, {{{3, 0}, 0.9},    // 0.9 / 2.6 = 0.346
                                          {{3, 1}, 0.6},    // 0.6 / 4.4 = 0.136
                                          {{4, 2}, 0.9},    // 0.9 / 3.5 = 0.257
                                          {{5, 3}, 0.5},    // 0.5 / 6.0 = 0.083
                                          {{7, 0}, 0.95},   // distance 5: beyond the lookahead
                                          {{3, 2}, 0.1},    // below min_prefetch_probability
                                          {{2, 1}, 1.0}}))  // the running layer: on demand
                  .ok());
  ExpertPrefetchPlan plan = p->PlanPrefetch(3);
  ASSERT_EQ(plan.loads.size(), 3u);
  EXPECT_EQ(plan.loads[0].key, (ExpertKey{3, 0}));
  EXPECT_EQ(plan.loads[1].key, (ExpertKey{4, 2}));
  EXPECT_EQ(plan.loads[2].key, (ExpertKey{3, 1}));
  EXPECT_NEAR(plan.loads[0].urgency, 0.9 / 2.6, 1e-12);
  EXPECT_GT(plan.loads[1].urgency, plan.loads[2].urgency);
  EXPECT_TRUE(plan.evictions.empty());
  EXPECT_EQ(plan.num_dropped, 0);
  EXPECT_TRUE(p->IsResident({3, 1}));
  // One candidate is left, and one free slot.
  plan = p->PlanPrefetch(3);
  ASSERT_EQ(plan.loads.size(), 1u);
  EXPECT_EQ(plan.loads[0].key, (ExpertKey{5, 3}));
  EXPECT_EQ(p->num_resident(), 4);
  EXPECT_TRUE(p->PlanPrefetch(3).loads.empty());
  EXPECT_EQ(p->stats().prefetches_issued, 4);
  EXPECT_EQ(p->PlanPrefetch(0).loads.size(), 0u);
}

TEST(ActivationPolicyTest, PrefetchEvictsOnlyWhatIsPredictedLessUseful) {
  std::unique_ptr<ExpertCachePolicy> p = Activation(4);
  ASSERT_TRUE(p->SetForecast(Forecast(2, {{{3, 0}, 0.9}, {{3, 1}, 0.6}, {{4, 2}, 0.9},
                                          {{5, 3}, 0.5}}))
                  .ok());
  ASSERT_EQ(p->PlanPrefetch(4).loads.size(), 4u);
  // Layer 3 runs. (4, 0) at 1.0 * 8/9 outranks (5, 3) at 0.5 * 7/9; (6, 1) at 0.5 * 6/9 = 0.33
  // outranks nothing left: (3, 1) is 0.6 at the running layer.
  ASSERT_TRUE(p->SetForecast(Forecast(3, {{{3, 0}, 0.9}, {{3, 1}, 0.6}, {{4, 2}, 0.9},
                                          {{5, 3}, 0.5}, {{4, 0}, 1.0}, {{6, 1}, 0.5}}))
                  .ok());
  const ExpertPrefetchPlan plan = p->PlanPrefetch(3);
  ASSERT_EQ(plan.loads.size(), 1u);
  EXPECT_EQ(plan.loads[0].key, (ExpertKey{4, 0}));
  EXPECT_EQ(plan.evictions, (std::vector<ExpertKey>{{5, 3}}));
  EXPECT_EQ(plan.num_dropped, 1);
  EXPECT_FALSE(plan.all_pinned);
  EXPECT_EQ(p->stats().prefetches_wasted, 1);  // (5, 3) never used
  EXPECT_EQ(p->stats().prefetches_dropped, 1);
  // A prefetched expert that is accessed counts as used, once.
  ASSERT_TRUE(p->Access({3, 0}).ok());
  ASSERT_TRUE(p->Access({3, 0}).ok());
  EXPECT_EQ(p->stats().prefetches_used, 1);
  EXPECT_EQ(p->stats().hits, 2);
  EXPECT_EQ(p->num_prefetched_unused(), 3);
}

TEST(ActivationPolicyTest, PrefetchDoesNotTradeALikelyFarExpertForALessLikelyNearOne) {
  std::unique_ptr<ExpertCachePolicy> p = Activation(1);
  ASSERT_TRUE(p->Access({1, 0}).ok());
  // Current layer 2: (1, 0) ran just before and is 7 layers away, but its next token will use it
  // with probability 0.9; (3, 0), next, only with 0.5.
  ASSERT_TRUE(p->SetForecast(Forecast(2, {{{1, 0}, 0.9}, {{3, 0}, 0.5}})).ok());
  ExpertPrefetchPlan plan = p->PlanPrefetch(2);
  EXPECT_TRUE(plan.loads.empty());
  EXPECT_EQ(plan.num_dropped, 1);
  EXPECT_TRUE(p->IsResident({1, 0}));
  // A likelier candidate does replace it.
  ASSERT_TRUE(p->SetForecast(Forecast(2, {{{1, 0}, 0.9}, {{3, 0}, 0.95}})).ok());
  plan = p->PlanPrefetch(2);
  ASSERT_EQ(plan.loads.size(), 1u);
  EXPECT_EQ(plan.evictions, (std::vector<ExpertKey>{{1, 0}}));
}

TEST(ActivationPolicyTest, PrefetchSaysSoWhenEverySlotIsPinned) {
  std::unique_ptr<ExpertCachePolicy> p = Activation(2);
  for (ExpertKey key : {ExpertKey{0, 0}, ExpertKey{0, 1}}) {
    ASSERT_TRUE(p->Access(key).ok());
    ASSERT_TRUE(p->Pin(key).ok());
  }
  ASSERT_TRUE(p->SetForecast(Forecast(0, {{{1, 0}, 1.0}, {{1, 1}, 1.0}})).ok());
  const ExpertPrefetchPlan plan = p->PlanPrefetch(4);
  EXPECT_TRUE(plan.loads.empty());
  EXPECT_TRUE(plan.all_pinned);
  EXPECT_EQ(plan.num_dropped, 2);
  EXPECT_EQ(p->Resident(), (std::vector<ExpertKey>{{0, 0}, {0, 1}}));
}

TEST(ActivationPolicyTest, PrefetchCanBeTurnedOff) {
  std::unique_ptr<ExpertCachePolicy> p = Activation(4, /*prefetch=*/false);
  ASSERT_TRUE(p->SetForecast(Forecast(0, {{{1, 0}, 1.0}})).ok());
  EXPECT_TRUE(p->PlanPrefetch(4).loads.empty());
  EXPECT_EQ(p->num_resident(), 0);
}

// The keep-score is the forecast's Priority, the unit of a hint's urgency: the lower-scored of
// two resident experts is the one the policy evicts, and before a forecast every score is 0 (the
// store then falls back to recency, as the policy does).
TEST(ActivationPolicyTest, KeepScoreIsThePredictedUse) {
  std::unique_ptr<ExpertCachePolicy> p = Activation(2);
  EXPECT_TRUE(p->UsesForecast());
  Evicted(*p, {2, 0});
  Evicted(*p, {3, 0});
  EXPECT_EQ(p->KeepScore({2, 0}), 0.0);
  EXPECT_EQ(p->KeepScore({3, 0}), 0.0);
  ASSERT_TRUE(p->SetForecast(Forecast(1, {{{2, 0}, 0.3}, {{3, 0}, 0.9}})).ok());
  // 1 / (1 + d + L (1 - q) / q) with L = 8: d = 1, q = 0.3 and d = 2, q = 0.9.
  EXPECT_NEAR(p->KeepScore({2, 0}), 0.3 / (0.3 * 2.0 + 8.0 * 0.7), 1e-12);
  EXPECT_NEAR(p->KeepScore({3, 0}), 0.9 / (0.9 * 3.0 + 8.0 * 0.1), 1e-12);
  EXPECT_EQ(Evicted(*p, {1, 1}), (ExpertKey{2, 0}));
}

}  // namespace
}  // namespace loom
