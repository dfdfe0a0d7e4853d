#include "scheduler/experts/lru_policy.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

std::unique_ptr<ExpertCachePolicy> Lru(int32_t capacity) {
  absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> p = ExpertCachePolicy::Create(
      "lru", {.num_layers = 2, .num_experts = 4, .capacity_slots = capacity});
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

// Accesses `keys` in order; returns what each access evicted ({-1, -1} for nothing).
std::vector<ExpertKey> AccessAll(ExpertCachePolicy& p, const std::vector<ExpertKey>& keys) {
  std::vector<ExpertKey> evicted;
  for (ExpertKey key : keys) {
    absl::StatusOr<ExpertAccess> a = p.Access(key);
    EXPECT_TRUE(a.ok()) << a.status();
    evicted.push_back(a.ok() && a->evicted.has_value() ? *a->evicted : ExpertKey{-1, -1});
  }
  return evicted;
}

constexpr ExpertKey kA{0, 0}, kB{0, 1}, kC{1, 0}, kD{1, 1}, kE{0, 3};
constexpr ExpertKey kNone{-1, -1};

TEST(LruPolicyTest, EvictsTheLeastRecentlyUsed) {
  std::unique_ptr<ExpertCachePolicy> p = Lru(3);
  // A B C fill; A is used again, so D evicts B; C is then the oldest; A again, E evicts D.
  EXPECT_EQ(AccessAll(*p, {kA, kB, kC, kA, kD, kB, kA, kE}),
            (std::vector<ExpertKey>{kNone, kNone, kNone, kNone, kB, kC, kNone, kD}));
  EXPECT_EQ(p->Resident(), (std::vector<ExpertKey>{kA, kB, kE}));
  EXPECT_EQ(p->stats().hits, 2);
  EXPECT_EQ(p->stats().misses, 6);
}

TEST(LruPolicyTest, FrequencyDoesNotProtect) {
  std::unique_ptr<ExpertCachePolicy> p = Lru(2);
  // A is used five times, then B and C once each: A is least recent when C arrives.
  EXPECT_EQ(AccessAll(*p, {kA, kA, kA, kA, kA, kB, kC}),
            (std::vector<ExpertKey>{kNone, kNone, kNone, kNone, kNone, kNone, kA}));
}

TEST(LruPolicyTest, SkipsPinnedAndNeverPrefetches) {
  std::unique_ptr<ExpertCachePolicy> p = Lru(2);
  AccessAll(*p, {kA, kB});
  ASSERT_TRUE(p->Pin(kA).ok());
  EXPECT_EQ(AccessAll(*p, {kC}), (std::vector<ExpertKey>{kB}));
  ExpertForecast f = *ExpertForecast::Zeros(2, 4, 0);
  f.set_probability(kD, 1.0);
  ASSERT_TRUE(p->SetForecast(f).ok());
  const ExpertPrefetchPlan plan = p->PlanPrefetch(4);
  EXPECT_TRUE(plan.loads.empty());
  EXPECT_EQ(p->stats().prefetches_issued, 0);
}

// The score the engine's store evicts by puts the least recently used resident expert lowest,
// so the store evicts what the policy would.
TEST(LruPolicyTest, KeepScoreIsRecency) {
  std::unique_ptr<ExpertCachePolicy> p = Lru(3);
  AccessAll(*p, {kA, kB, kC, kA});
  EXPECT_LT(p->KeepScore(kB), p->KeepScore(kC));
  EXPECT_LT(p->KeepScore(kC), p->KeepScore(kA));
  EXPECT_EQ(AccessAll(*p, {kD}), (std::vector<ExpertKey>{kB}));
  EXPECT_FALSE(p->UsesForecast());
  EXPECT_EQ(p->KeepScore({5, 0}), 0.0);  // outside the model
}

}  // namespace
}  // namespace loom
