#include "scheduler/experts/lfu_policy.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

std::unique_ptr<ExpertCachePolicy> Lfu(int32_t capacity) {
  absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> p = ExpertCachePolicy::Create(
      "lfu", {.num_layers = 2, .num_experts = 4, .capacity_slots = capacity});
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

std::vector<ExpertKey> AccessAll(ExpertCachePolicy& p, const std::vector<ExpertKey>& keys) {
  std::vector<ExpertKey> evicted;
  for (ExpertKey key : keys) {
    absl::StatusOr<ExpertAccess> a = p.Access(key);
    EXPECT_TRUE(a.ok()) << a.status();
    evicted.push_back(a.ok() && a->evicted.has_value() ? *a->evicted : ExpertKey{-1, -1});
  }
  return evicted;
}

constexpr ExpertKey kA{0, 0}, kB{0, 1}, kC{1, 0}, kD{1, 1};
constexpr ExpertKey kNone{-1, -1};

TEST(LfuPolicyTest, EvictsTheLeastFrequentlyUsed) {
  std::unique_ptr<ExpertCachePolicy> p = Lfu(2);
  // A three times, B once: C evicts B although A is less recent; then D evicts C (one access
  // against A's three).
  EXPECT_EQ(AccessAll(*p, {kA, kA, kA, kB, kC, kD}),
            (std::vector<ExpertKey>{kNone, kNone, kNone, kNone, kB, kC}));
  EXPECT_EQ(p->Resident(), (std::vector<ExpertKey>{kA, kD}));
}

TEST(LfuPolicyTest, TiesGoToTheLeastRecentlyUsed) {
  std::unique_ptr<ExpertCachePolicy> p = Lfu(3);
  // A, B, C twice each; the last use of B is the oldest.
  EXPECT_EQ(AccessAll(*p, {kA, kB, kC, kB, kA, kC, kD}),
            (std::vector<ExpertKey>{kNone, kNone, kNone, kNone, kNone, kNone, kB}));
}

TEST(LfuPolicyTest, CountsSurviveEviction) {
  std::unique_ptr<ExpertCachePolicy> p = Lfu(2);
  // B is used four times and evicted (A is pinned); when it comes back it keeps its count, so
  // C (two uses) goes before it.
  AccessAll(*p, {kB, kB, kB, kB, kA, kA, kA, kA, kA});
  ASSERT_TRUE(p->Pin(kA).ok());
  EXPECT_EQ(AccessAll(*p, {kC}), (std::vector<ExpertKey>{kB}));
  ASSERT_TRUE(p->Unpin(kA).ok());
  EXPECT_EQ(AccessAll(*p, {kC}), (std::vector<ExpertKey>{kNone}));
  ASSERT_TRUE(p->Pin(kA).ok());
  EXPECT_EQ(AccessAll(*p, {kB}), (std::vector<ExpertKey>{kC}));
  ASSERT_TRUE(p->Unpin(kA).ok());
  // Resident: A and B, five accesses each; A's last use is the older, so C evicts A.
  EXPECT_EQ(AccessAll(*p, {kC}), (std::vector<ExpertKey>{kA}));
}

// A more frequently used expert scores higher whatever the recency: the store evicts the
// least frequently used first, as the policy does.
TEST(LfuPolicyTest, KeepScoreIsTheAccessCount) {
  std::unique_ptr<ExpertCachePolicy> p = Lfu(2);
  AccessAll(*p, {kA, kA, kA, kB});
  EXPECT_EQ(p->KeepScore(kA), 3.0);
  EXPECT_EQ(p->KeepScore(kB), 1.0);
  EXPECT_EQ(AccessAll(*p, {kC}), (std::vector<ExpertKey>{kB}));
  EXPECT_FALSE(p->UsesForecast());
}

}  // namespace
}  // namespace loom
