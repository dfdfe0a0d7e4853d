#include "scheduler/experts/trace_collection.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr int32_t kLayers = 3;
constexpr int32_t kExperts = 4;

// A matrix whose every layer routes `n` tokens to `expert` and one to the expert after it.
ActivationMatrix Peaked(int32_t expert, int32_t n = 10) {
  ActivationMatrix m = *ActivationMatrix::Zeros(kLayers, kExperts);
  for (int32_t l = 0; l < kLayers; ++l) {
    EXPECT_TRUE(m.Add({l, expert}, n).ok());
    EXPECT_TRUE(m.Add({l, (expert + 1) % kExperts}, 1).ok());
  }
  return m;
}

TraceCollection Make(int32_t capacity, double merge_similarity = 0.95) {
  absl::StatusOr<TraceCollection> c = TraceCollection::Create(
      kLayers, kExperts, {.capacity = capacity, .merge_similarity = merge_similarity});
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

TEST(TraceCollectionTest, CreateValidatesTheConfig) {
  EXPECT_FALSE(TraceCollection::Create(0, 4, {}).ok());
  EXPECT_FALSE(TraceCollection::Create(2, 4, {.capacity = 0}).ok());
  EXPECT_FALSE(TraceCollection::Create(2, 4, {.capacity = 4, .merge_similarity = 0.0}).ok());
  EXPECT_FALSE(TraceCollection::Create(2, 4, {.capacity = 4, .merge_similarity = 1.5}).ok());
}

TEST(TraceCollectionTest, AppendsUntilFullEvenIdenticalMatrices) {
  TraceCollection c = Make(3);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<TraceCollection::InsertResult> r = c.Insert(Peaked(0));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->outcome, TraceCollection::InsertOutcome::kAppended);
    EXPECT_EQ(r->entry_id, static_cast<uint64_t>(i + 1));
  }
  EXPECT_EQ(c.size(), 3);
}

TEST(TraceCollectionTest, IgnoresEmptyMatricesAndRejectsOtherShapes) {
  TraceCollection c = Make(3);
  absl::StatusOr<TraceCollection::InsertResult> r = c.Insert(*ActivationMatrix::Zeros(kLayers, kExperts));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, TraceCollection::InsertOutcome::kIgnored);
  EXPECT_EQ(c.Insert(*ActivationMatrix::Zeros(kLayers + 1, kExperts)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.num_insertions(), 0);
}

TEST(TraceCollectionTest, WhenFullANearIdenticalMatrixMergesIntoTheMostSimilarEntry) {
  TraceCollection c = Make(2);
  ASSERT_TRUE(c.Insert(Peaked(0)).ok());
  ASSERT_TRUE(c.Insert(Peaked(2)).ok());
  // Same shape as entry 2, at another scale: near-identical.
  absl::StatusOr<TraceCollection::InsertResult> r = c.Insert(Peaked(2, 20));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, TraceCollection::InsertOutcome::kMerged);
  EXPECT_EQ(r->entry_id, 2u);
  const TraceEntry* merged = c.Find(2);
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->num_requests, 2);
  EXPECT_EQ(merged->matrix.count({1, 2}), 30);
  EXPECT_EQ(merged->matrix.count({1, 3}), 2);
  EXPECT_EQ(c.Find(1)->num_requests, 1);
  EXPECT_EQ(c.size(), 2);
}

TEST(TraceCollectionTest, WhenFullADissimilarMatrixReplacesTheLeastUsefulEntry) {
  TraceCollection c = Make(3);
  ASSERT_TRUE(c.Insert(Peaked(0)).ok());  // id 1
  ASSERT_TRUE(c.Insert(Peaked(1)).ok());  // id 2
  ASSERT_TRUE(c.Insert(Peaked(2)).ok());  // id 3
  c.CreditMatch(1);
  c.CreditMatch(1);
  c.CreditMatch(3);
  c.CreditMatch(99);  // not held: ignored
  // Entry 2 has no credit: it goes first.
  absl::StatusOr<TraceCollection::InsertResult> r = c.Insert(Peaked(3));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, TraceCollection::InsertOutcome::kReplaced);
  EXPECT_EQ(r->replaced_id, 2u);
  EXPECT_EQ(r->entry_id, 4u);
  EXPECT_EQ(c.Find(2), nullptr);
  EXPECT_EQ(c.entries()[1].id, 4u);  // the slot is reused
  // Now 4 (no credit) is the least useful; an uncredited tie would go to the least recently
  // touched. Credit 4 twice: then 3 (one credit) goes.
  c.CreditMatch(4);
  c.CreditMatch(4);
  r = c.Insert(Peaked(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->replaced_id, 3u);
}

TEST(TraceCollectionTest, TiesOnCreditGoToTheLeastRecentlyTouched) {
  TraceCollection c = Make(2);
  ASSERT_TRUE(c.Insert(Peaked(0)).ok());  // id 1
  ASSERT_TRUE(c.Insert(Peaked(2)).ok());  // id 2
  absl::StatusOr<TraceCollection::InsertResult> r = c.Insert(Peaked(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->replaced_id, 1u);
  r = c.Insert(Peaked(3));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->replaced_id, 2u);
}

TEST(TraceCollectionTest, CreditHalvesEveryCapacityInsertions) {
  TraceCollection c = Make(2, /*merge_similarity=*/1.0);
  ASSERT_TRUE(c.Insert(Peaked(0)).ok());
  c.CreditMatch(1);
  c.CreditMatch(1);
  EXPECT_DOUBLE_EQ(c.DecayedCredit(*c.Find(1)), 2.0);
  ASSERT_TRUE(c.Insert(Peaked(1)).ok());
  ASSERT_TRUE(c.Insert(Peaked(2)).ok());  // replaces 2 (no credit); two insertions since
  ASSERT_NE(c.Find(1), nullptr);
  EXPECT_DOUBLE_EQ(c.DecayedCredit(*c.Find(1)), 1.0);
}

TEST(TraceCollectionTest, StaysBoundedAndIsDeterministic) {
  auto run = [](std::vector<TraceCollection::InsertResult>* results) {
    TraceCollection c = Make(8, 0.9);
    std::mt19937 rng(7);
    for (int i = 0; i < 300; ++i) {
      ActivationMatrix m = *ActivationMatrix::Zeros(kLayers, kExperts);
      for (int32_t l = 0; l < kLayers; ++l) {
        for (int32_t e = 0; e < kExperts; ++e) EXPECT_TRUE(m.Add({l, e}, rng() % 5).ok());
      }
      absl::StatusOr<TraceCollection::InsertResult> r = c.Insert(m);
      EXPECT_TRUE(r.ok());
      results->push_back(*r);
      EXPECT_LE(c.size(), 8);
      if (i % 3 == 0 && !c.empty()) c.CreditMatch(c.entries()[rng() % c.size()].id);
    }
    return c;
  };
  std::vector<TraceCollection::InsertResult> first, second;
  TraceCollection a = run(&first);
  TraceCollection b = run(&second);
  EXPECT_EQ(a.size(), 8);
  ASSERT_EQ(first.size(), second.size());
  int num_merged = 0, num_replaced = 0;
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].outcome, second[i].outcome);
    EXPECT_EQ(first[i].entry_id, second[i].entry_id);
    EXPECT_EQ(first[i].replaced_id, second[i].replaced_id);
    num_merged += first[i].outcome == TraceCollection::InsertOutcome::kMerged;
    num_replaced += first[i].outcome == TraceCollection::InsertOutcome::kReplaced;
  }
  // Both paths ran.
  EXPECT_GT(num_merged, 0);
  EXPECT_GT(num_replaced, 0);
  for (int32_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a.entries()[i].id, b.entries()[i].id);
    EXPECT_EQ(a.entries()[i].matrix.total(), b.entries()[i].matrix.total());
  }
}

}  // namespace
}  // namespace loom
