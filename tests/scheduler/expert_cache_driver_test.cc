#include "scheduler/experts/expert_cache_driver.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr int32_t kExperts = 4;

// `num_layers` decoder layers with `kExperts` experts, top-2; `sparse` says which layers are MoE
// (empty: all).
ModelInfo Moe(int32_t num_layers, std::vector<bool> sparse = {}) {
  ModelInfo info;
  info.num_layers = num_layers;
  info.num_experts = kExperts;
  info.num_experts_per_tok = 2;
  info.sparse_layers = std::move(sparse);
  return info;
}

std::unique_ptr<ExpertCacheDriver> Driver(const ModelInfo& model, int32_t slots,
                                          ExpertCacheDriverConfig config = {}) {
  absl::StatusOr<std::unique_ptr<ExpertCacheDriver>> d =
      ExpertCacheDriver::Create(model, slots, config);
  EXPECT_TRUE(d.ok()) << d.status();
  EXPECT_NE(d.ok() ? d->get() : nullptr, nullptr);
  return d.ok() ? *std::move(d) : nullptr;
}

// A routing record over every decoder layer: `tokens` tokens to experts `a` and `b` of every
// sparse layer (dense layers' rows stay zero, as the engine reports them).
std::vector<int32_t> Routing(const ModelInfo& model, int32_t a, int32_t b, int32_t tokens = 1) {
  std::vector<int32_t> counts(static_cast<size_t>(model.num_layers) * kExperts, 0);
  for (int32_t l = 0; l < model.num_layers; ++l) {
    if (!model.sparse_layers.empty() && !model.sparse_layers[l]) continue;
    counts[l * kExperts + a] += tokens;
    counts[l * kExperts + b] += tokens;
  }
  return counts;
}

double ScoreOf(const StepPlan& plan, ExpertKey key) {
  for (const ExpertScore& s : plan.expert_scores) {
    if (s.key == key) return s.score;
  }
  ADD_FAILURE() << "no score for " << key;
  return -1;
}

TEST(ExpertCacheDriverTest, NothingToDriveWithoutExpertsOrSlots) {
  ModelInfo dense_model;
  dense_model.num_layers = 4;
  absl::StatusOr<std::unique_ptr<ExpertCacheDriver>> dense =
      ExpertCacheDriver::Create(dense_model, 8, {});
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(*dense, nullptr);
  absl::StatusOr<std::unique_ptr<ExpertCacheDriver>> no_slots =
      ExpertCacheDriver::Create(Moe(4), 0, {});
  ASSERT_TRUE(no_slots.ok());
  EXPECT_EQ(*no_slots, nullptr);
  // A model whose layers are all dense has nothing to cache either.
  absl::StatusOr<std::unique_ptr<ExpertCacheDriver>> all_dense =
      ExpertCacheDriver::Create(Moe(2, {false, false}), 8, {});
  ASSERT_TRUE(all_dense.ok());
  EXPECT_EQ(*all_dense, nullptr);
}

TEST(ExpertCacheDriverTest, RefusesAnUnknownPolicyOrBadBounds) {
  EXPECT_FALSE(ExpertCacheDriver::Create(Moe(2), 4, {.policy = "fifo"}).ok());
  EXPECT_FALSE(ExpertCacheDriver::Create(Moe(2), 4, {.trace_capacity = 0}).ok());
  EXPECT_FALSE(ExpertCacheDriver::Create(Moe(2), 4, {.max_rematches_per_step = 0}).ok());
  for (const char* name : {"activation", "lru", "lfu"}) {
    absl::StatusOr<std::unique_ptr<ExpertCacheDriver>> d =
        ExpertCacheDriver::Create(Moe(2), 4, {.policy = name});
    ASSERT_TRUE(d.ok()) << name;
    EXPECT_EQ((*d)->policy().name(), name);
  }
  // More slots than routed experts: every expert fits.
  EXPECT_EQ(Driver(Moe(2), 1000)->policy().capacity_slots(), 2 * kExperts);
}

// Only sparse layers count: dense rows are dropped, and keys name MoE layers in decoder order.
TEST(ExpertCacheDriverTest, MatricesHoldSparseLayersOnly) {
  const ModelInfo model = Moe(4, {false, true, false, true});
  std::unique_ptr<ExpertCacheDriver> d = Driver(model, 8, {.policy = "lru"});
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->num_moe_layers(), 2);
  ASSERT_TRUE(d->AddRouting(RequestId(1), Routing(model, 0, 3, 5)).ok());
  const ActivationMatrix* m = d->RequestMatrix(RequestId(1));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->num_layers(), 2);
  EXPECT_EQ(m->count({0, 0}), 5);
  EXPECT_EQ(m->count({1, 3}), 5);
  EXPECT_EQ(m->total(), 20);
  d->EndStep();
  EXPECT_EQ(d->policy().Resident(),
            (std::vector<ExpertKey>{{0, 0}, {0, 3}, {1, 0}, {1, 3}}));
  // A record of the wrong size, or with a negative count, adds nothing.
  EXPECT_FALSE(d->AddRouting(RequestId(1), std::vector<int32_t>(3, 1)).ok());
  std::vector<int32_t> negative = Routing(model, 1, 2);
  negative[4] = -1;
  EXPECT_FALSE(d->AddRouting(RequestId(1), negative).ok());
  EXPECT_EQ(d->RequestMatrix(RequestId(1))->total(), 20);
  EXPECT_EQ(d->popularity().total(), 20);
  // An empty record (a step the engine did not route) is fine and adds nothing.
  EXPECT_TRUE(d->AddRouting(RequestId(1), {}).ok());
}

// The step's union goes through the mirror in layer order, so with "lru" the expert used least
// recently scores lowest; lru never hints.
TEST(ExpertCacheDriverTest, LruScoresFollowTheStepsTheEngineRan) {
  const ModelInfo model = Moe(2);
  std::unique_ptr<ExpertCacheDriver> d = Driver(model, 8, {.policy = "lru"});
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->AddRouting(RequestId(1), Routing(model, 0, 1)).ok());
  d->EndStep();
  ASSERT_TRUE(d->AddRouting(RequestId(1), Routing(model, 2, 1)).ok());
  d->EndStep();
  StepPlan plan;
  const std::vector<RequestId> batch = {RequestId(1)};
  d->PlanStep(batch, plan);
  EXPECT_TRUE(plan.expert_prefetch.empty());
  ASSERT_EQ(plan.expert_scores.size(), 6u);  // L0/E0..2, L1/E0..2
  // (0, 0) was used in the first step only, before layer 1's experts: lowest of all.
  for (const ExpertScore& s : plan.expert_scores) {
    if (s.key != ExpertKey{0, 0}) {
      EXPECT_LT(ScoreOf(plan, {0, 0}), s.score) << s.key;
    }
  }
  EXPECT_LT(ScoreOf(plan, {1, 0}), ScoreOf(plan, {0, 1}));  // step 1 before step 2
  EXPECT_LT(ScoreOf(plan, {0, 2}), ScoreOf(plan, {1, 1}));  // layer order within a step
  EXPECT_EQ(d->policy().stats().hits, 2);  // expert 1 of both layers, in the second step
}

TEST(ExpertCacheDriverTest, LfuScoresAreUseCounts) {
  const ModelInfo model = Moe(1);
  std::unique_ptr<ExpertCacheDriver> d = Driver(model, 4, {.policy = "lfu"});
  ASSERT_NE(d, nullptr);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(d->AddRouting(RequestId(1), Routing(model, 0, step == 0 ? 3 : 2)).ok());
    d->EndStep();
  }
  StepPlan plan;
  d->PlanStep(std::vector<RequestId>{RequestId(1)}, plan);
  EXPECT_EQ(ScoreOf(plan, {0, 0}), 3.0);
  EXPECT_EQ(ScoreOf(plan, {0, 2}), 2.0);
  EXPECT_EQ(ScoreOf(plan, {0, 3}), 1.0);
}

// A finished request's matrix joins the collection (once); one that routed nothing does not.
TEST(ExpertCacheDriverTest, FinishedRequestsJoinTheCollection) {
  const ModelInfo model = Moe(2);
  std::unique_ptr<ExpertCacheDriver> d = Driver(model, 4);
  ASSERT_NE(d, nullptr);
  StepPlan plan;
  d->PlanStep(std::vector<RequestId>{RequestId(1), RequestId(2)}, plan);
  ASSERT_TRUE(d->AddRouting(RequestId(1), Routing(model, 0, 1, 3)).ok());
  d->EndStep();
  d->FinishRequest(RequestId(1));
  d->FinishRequest(RequestId(2));  // planned, never routed
  d->FinishRequest(RequestId(3));  // unknown
  ASSERT_EQ(d->collection().size(), 1);
  EXPECT_EQ(d->collection().entries()[0].matrix.count({1, 1}), 3);
  EXPECT_EQ(d->RequestMatrix(RequestId(1)), nullptr);
  d->FinishRequest(RequestId(1));  // already gone
  EXPECT_EQ(d->collection().size(), 1);
}

// With "activation", a request whose routing matches a past request's is forecast to follow it
// in the layers it has not shown yet: its experts there are hinted, most urgent (nearest layer)
// first, never the first layer (served on demand), and evicting what the forecast does not need.
TEST(ExpertCacheDriverTest, ActivationHintsTheExpertsOfASeenTopic) {
  const ModelInfo model = Moe(4);
  std::unique_ptr<ExpertCacheDriver> d = Driver(model, 4);
  ASSERT_NE(d, nullptr);
  // A past request routed to experts 0 and 1 in every layer.
  ASSERT_TRUE(d->AddRouting(RequestId(1), Routing(model, 0, 1, 8)).ok());
  d->EndStep();
  d->FinishRequest(RequestId(1));
  // Other traffic fills the mirror with experts 2 and 3.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(d->AddRouting(RequestId(2), Routing(model, 2, 3, 8)).ok());
    d->EndStep();
  }
  d->FinishRequest(RequestId(2));
  // Request 3 has run layer 0 only, on experts 0 and 1.
  std::vector<int32_t> partial(static_cast<size_t>(4) * kExperts, 0);
  partial[0] = partial[1] = 1;
  ASSERT_TRUE(d->AddRouting(RequestId(3), partial).ok());
  StepPlan plan;
  d->PlanStep(std::vector<RequestId>{RequestId(3)}, plan);
  ASSERT_FALSE(plan.expert_prefetch.empty());
  for (size_t i = 0; i < plan.expert_prefetch.size(); ++i) {
    const ExpertPrefetchHint& h = plan.expert_prefetch[i];
    EXPECT_GE(h.key.layer, 1) << h.key;
    EXPECT_LE(h.key.expert, 1) << h.key;  // the past request's experts
    if (i > 0) {
      EXPECT_GE(plan.expert_prefetch[i - 1].urgency, h.urgency);
    }
  }
  EXPECT_EQ(plan.expert_prefetch[0].key.layer, 1);
  // Hinted experts are in the mirror now, scored by their predicted use.
  for (const ExpertPrefetchHint& h : plan.expert_prefetch) {
    EXPECT_TRUE(d->policy().IsResident(h.key));
    EXPECT_GT(ScoreOf(plan, h.key), 0.0);
  }
  // The other traffic's experts were predicted unused, so they made room.
  EXPECT_FALSE(d->policy().IsResident({2, 2}));
  EXPECT_FALSE(d->policy().IsResident({3, 3}));
}

// Matching against the collection is the costly part: at most max_rematches_per_step requests
// are matched per step (each match credits the best entry once), the rest in later steps.
TEST(ExpertCacheDriverTest, RematchingIsBoundedPerStep) {
  const ModelInfo model = Moe(2);
  std::unique_ptr<ExpertCacheDriver> d =
      Driver(model, 4, {.rematch_interval_steps = 100, .max_rematches_per_step = 3});
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->AddRouting(RequestId(100), Routing(model, 0, 1)).ok());
  d->EndStep();
  d->FinishRequest(RequestId(100));
  ASSERT_EQ(d->collection().size(), 1);
  std::vector<RequestId> batch;
  for (uint64_t id = 1; id <= 7; ++id) {
    batch.push_back(RequestId(id));
    ASSERT_TRUE(d->AddRouting(RequestId(id), Routing(model, 0, 1)).ok());
  }
  d->EndStep();
  const TraceEntry& entry = d->collection().entries()[0];
  StepPlan plan;
  d->PlanStep(batch, plan);
  EXPECT_DOUBLE_EQ(entry.credit, 3.0);
  d->PlanStep(batch, plan);
  EXPECT_DOUBLE_EQ(entry.credit, 6.0);
  d->PlanStep(batch, plan);
  EXPECT_DOUBLE_EQ(entry.credit, 7.0);
  d->PlanStep(batch, plan);  // everyone matched, none due for 100 steps
  EXPECT_DOUBLE_EQ(entry.credit, 7.0);
}

}  // namespace
}  // namespace loom
