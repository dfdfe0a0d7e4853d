// What every expert-cache policy guarantees: the factory, pinning, capacity, counters, and
// refusing (never silently) when every slot is pinned. Policy-specific orders are tested in
// lru_policy_test.cc, lfu_policy_test.cc and activation_policy_test.cc.
#include "scheduler/experts/expert_cache_policy.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr int32_t kLayers = 4;
constexpr int32_t kExperts = 4;

std::unique_ptr<ExpertCachePolicy> Make(std::string_view name, int32_t capacity) {
  absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> p = ExpertCachePolicy::Create(
      name, {.num_layers = kLayers, .num_experts = kExperts, .capacity_slots = capacity});
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

TEST(ExpertCachePolicyTest, CreateKnowsThreeNamesAndValidatesTheConfig) {
  for (std::string_view name : ExpertCachePolicy::Names()) {
    std::unique_ptr<ExpertCachePolicy> p = Make(name, 4);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->name(), name);
  }
  EXPECT_EQ(ExpertCachePolicy::Names().size(), 3u);
  const ExpertCacheConfig good{.num_layers = 2, .num_experts = 2, .capacity_slots = 2};
  absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> p = ExpertCachePolicy::Create("fifo", good);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(p.status().message()).find("activation, lru, lfu"), std::string::npos);
  ExpertCacheConfig bad = good;
  bad.capacity_slots = 0;
  EXPECT_FALSE(ExpertCachePolicy::Create("lru", bad).ok());
  bad.capacity_slots = 5;  // more than 2 x 2 experts
  EXPECT_FALSE(ExpertCachePolicy::Create("lru", bad).ok());
  bad = good;
  bad.num_experts = 0;
  EXPECT_FALSE(ExpertCachePolicy::Create("lfu", bad).ok());
  bad = good;
  bad.min_prefetch_probability = 1.5;
  EXPECT_FALSE(ExpertCachePolicy::Create("activation", bad).ok());
  bad = good;
  bad.prefetch_lookahead_layers = 0;
  EXPECT_FALSE(ExpertCachePolicy::Create("activation", bad).ok());
}

TEST(ExpertCachePolicyTest, AccessCountsHitsAndMissesAndChecksKeys) {
  for (std::string_view name : ExpertCachePolicy::Names()) {
    std::unique_ptr<ExpertCachePolicy> p = Make(name, 2);
    absl::StatusOr<ExpertAccess> a = p->Access({0, 1});
    ASSERT_TRUE(a.ok());
    EXPECT_FALSE(a->hit);
    EXPECT_FALSE(a->evicted.has_value());
    a = p->Access({0, 1});
    ASSERT_TRUE(a.ok());
    EXPECT_TRUE(a->hit);
    ASSERT_TRUE(p->Access({1, 1}).ok());
    a = p->Access({2, 1});  // full: someone goes
    ASSERT_TRUE(a.ok());
    EXPECT_TRUE(a->evicted.has_value());
    EXPECT_FALSE(p->IsResident(*a->evicted));
    EXPECT_EQ(p->num_resident(), 2);
    EXPECT_EQ(p->stats().hits, 1);
    EXPECT_EQ(p->stats().misses, 3);
    EXPECT_EQ(p->stats().evictions, 1);
    EXPECT_EQ(p->Access({kLayers, 0}).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(p->Access({0, -1}).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(p->Pin({0, kExperts}).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ExpertCachePolicyTest, PinNeedsAResidentExpertAndUnpinAPinnedOne) {
  std::unique_ptr<ExpertCachePolicy> p = Make("lru", 2);
  EXPECT_EQ(p->Pin({0, 0}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(p->Access({0, 0}).ok());
  EXPECT_EQ(p->Unpin({0, 0}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(p->Pin({0, 0}).ok());
  ASSERT_TRUE(p->Pin({0, 0}).ok());
  EXPECT_EQ(p->pin_count({0, 0}), 2);
  ASSERT_TRUE(p->Unpin({0, 0}).ok());
  ASSERT_TRUE(p->Unpin({0, 0}).ok());
  EXPECT_EQ(p->Unpin({0, 0}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ExpertCachePolicyTest, EveryPinnedSlotIsRefusedLoudlyAndChangesNothing) {
  for (std::string_view name : ExpertCachePolicy::Names()) {
    std::unique_ptr<ExpertCachePolicy> p = Make(name, 2);
    ASSERT_TRUE(p->Access({0, 0}).ok());
    ASSERT_TRUE(p->Pin({0, 0}).ok());
    ASSERT_TRUE(p->Access({0, 1}).ok());
    ASSERT_TRUE(p->Pin({0, 1}).ok());
    const ExpertCacheStats before = p->stats();
    absl::StatusOr<ExpertAccess> a = p->Access({3, 3});
    EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted) << name;
    EXPECT_NE(std::string(a.status().message()).find("pinned"), std::string::npos);
    EXPECT_FALSE(p->IsResident({3, 3}));
    EXPECT_EQ(p->Resident(), (std::vector<ExpertKey>{{0, 0}, {0, 1}}));
    EXPECT_EQ(p->stats().misses, before.misses);
    // A hit on a pinned expert is still fine, and once one is unpinned it is the victim.
    EXPECT_TRUE(p->Access({0, 1}).ok());
    ASSERT_TRUE(p->Unpin({0, 0}).ok());
    a = p->Access({3, 3});
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(a->evicted.has_value());
    EXPECT_EQ(*a->evicted, (ExpertKey{0, 0}));
  }
}

// Random accesses with random pins held across them: a pinned expert stays resident, the cache
// never exceeds its capacity, and the counters add up.
TEST(ExpertCachePolicyTest, PinnedExpertsAreNeverEvicted) {
  for (std::string_view name : ExpertCachePolicy::Names()) {
    std::unique_ptr<ExpertCachePolicy> p = Make(name, 5);
    std::mt19937 rng(11);
    std::vector<ExpertKey> pinned;
    int64_t num_accesses = 0;
    int num_refused = 0;
    for (int step = 0; step < 2000; ++step) {
      // Give the activation policy a changing forecast that likes the pinned experts least.
      if (step % 7 == 0) {
        ExpertForecast f = *ExpertForecast::Zeros(kLayers, kExperts, step % kLayers);
        for (int32_t l = 0; l < kLayers; ++l) {
          for (int32_t e = 0; e < kExperts; ++e) f.set_probability({l, e}, (rng() % 100) / 100.0);
        }
        for (ExpertKey key : pinned) f.set_probability(key, 0.0);
        ASSERT_TRUE(p->SetForecast(f).ok());
        const ExpertPrefetchPlan plan = p->PlanPrefetch(3);
        for (ExpertKey key : plan.evictions) EXPECT_EQ(p->pin_count(key), 0);
      }
      const ExpertKey key{static_cast<int32_t>(rng() % kLayers),
                          static_cast<int32_t>(rng() % kExperts)};
      absl::StatusOr<ExpertAccess> a = p->Access(key);
      if (!a.ok()) {
        EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
        ++num_refused;
      } else {
        ++num_accesses;
        if (a->evicted.has_value()) {
          EXPECT_EQ(p->pin_count(*a->evicted), 0);
        }
        if (rng() % 3 == 0) {
          ASSERT_TRUE(p->Pin(key).ok());
          pinned.push_back(key);
        }
      }
      if (!pinned.empty() && rng() % 3 == 0) {
        const size_t i = rng() % pinned.size();
        ASSERT_TRUE(p->Unpin(pinned[i]).ok());
        pinned.erase(pinned.begin() + i);
      }
      for (ExpertKey k : pinned) ASSERT_TRUE(p->IsResident(k)) << name << " evicted pinned " << k;
      ASSERT_LE(p->num_resident(), 5);
    }
    EXPECT_EQ(p->stats().hits + p->stats().misses, num_accesses);
    EXPECT_GT(num_refused, 0) << "the test never filled the cache with pins";
  }
}

TEST(ExpertCachePolicyTest, SetForecastChecksTheShape) {
  std::unique_ptr<ExpertCachePolicy> p = Make("activation", 2);
  EXPECT_EQ(p->SetForecast(*ExpertForecast::Zeros(kLayers, kExperts + 1, 0)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(p->SetForecast(*ExpertForecast::Zeros(kLayers, kExperts, 0)).ok());
}

}  // namespace
}  // namespace loom
