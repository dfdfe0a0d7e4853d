// The expert-cache policy in the scheduler's step loop (scheduler_experts.cc), driven by the
// fake executor, whose routing is a function of each token (FakeRoutedExperts): a request made
// of one repeated token t is "topic t", with experts {2t + 3l, 2t + 3l + 1} mod 8 in layer l.
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "tests/scheduler/fake_executor.h"

namespace loom {
namespace {

using testing::ExpectedTokens;
using testing::FakeExecutor;
using testing::FakeRoutedExperts;

constexpr int32_t kVocab = 50;
constexpr int32_t kLayers = 4;
constexpr int32_t kExperts = 8;

ModelInfo Dense() {
  ModelInfo info;
  info.vocab_size = kVocab;
  info.max_context_len = 512;
  info.num_layers = kLayers;
  return info;
}

ModelInfo Moe() {
  ModelInfo info = Dense();
  info.num_experts = kExperts;
  info.num_experts_per_tok = 2;
  info.sparse_layers.assign(kLayers, true);
  return info;
}

KvCapacity Capacity(int32_t expert_slots) {
  KvCapacity c;
  c.num_blocks = 64;
  c.block_size = 4;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  c.expert_cache_slots = expert_slots;
  return c;
}

SchedRequest Topic(uint64_t id, int32_t token, int32_t prompt_len, int32_t max_new) {
  SchedRequest r;
  r.id = RequestId(id);
  r.prompt.assign(prompt_len, TokenId(token));
  r.max_new_tokens = max_new;
  r.sampling.seed = id;
  return r;
}

// The experts topic `token` uses in MoE layer `layer`.
std::vector<int32_t> TopicExperts(int32_t token, int32_t layer) {
  return FakeRoutedExperts(TokenId(token), layer, Moe());
}

bool InTopic(int32_t token, ExpertKey key) {
  const std::vector<int32_t> experts = TopicExperts(token, key.layer);
  return std::find(experts.begin(), experts.end(), key.expert) != experts.end();
}

// Schedule, Execute, Update, with the invariants checked; the plan for the caller to inspect.
struct Loop {
  Scheduler& scheduler;
  FakeExecutor& executor;
  int64_t now_ms = 0;
  std::vector<StepPlan> plans{};
  std::map<uint64_t, std::vector<TokenId>> tokens{};  // choice 0 of each request

  const StepPlan& Step() {
    plans.push_back(scheduler.Schedule(now_ms));
    absl::StatusOr<StepResult> result = executor.Execute(plans.back());
    EXPECT_TRUE(result.ok()) << result.status();
    if (result.ok()) {
      EXPECT_TRUE(scheduler.Update(*result).ok());
    }
    EXPECT_TRUE(scheduler.CheckInvariants().ok());
    for (const ChoiceOutput& out : scheduler.TakeOutputs()) {
      std::vector<TokenId>& t = tokens[out.request_id.value()];
      t.insert(t.end(), out.new_tokens.begin(), out.new_tokens.end());
    }
    now_ms += 10;
    return plans.back();
  }
  void RunToEnd() {
    for (int i = 0; i < 10000 && scheduler.HasWork(); ++i) Step();
    EXPECT_FALSE(scheduler.HasWork());
  }
  // Adds `r` and runs until everything has finished.
  void Run(SchedRequest r) {
    EXPECT_TRUE(scheduler.Add(std::move(r)).ok());
    RunToEnd();
  }
};

bool PlanHasExpertFields(const StepPlan& plan) {
  return plan.report_expert_routing || !plan.expert_prefetch.empty() ||
         !plan.expert_scores.empty();
}

// Without an expert cache the scheduler is what it was: no routing asked, no hints, no scores,
// whether the model is dense (with slots it cannot use) or MoE with every expert resident.
TEST(SchedulerExpertsTest, NoCacheOrADenseModelEmitsNothing) {
  for (const auto& [model, slots] :
       std::vector<std::pair<ModelInfo, int32_t>>{{Dense(), 16}, {Moe(), 0}}) {
    FakeExecutor executor(model, Capacity(slots));
    Scheduler scheduler(SchedulerConfig{}, model, executor.capacity());
    EXPECT_EQ(scheduler.expert_cache_driver(), nullptr);
    Loop loop{scheduler, executor};
    ASSERT_TRUE(scheduler.Add(Topic(1, 3, 6, 4)).ok());
    ASSERT_TRUE(scheduler.Add(Topic(2, 5, 3, 4)).ok());
    loop.RunToEnd();
    for (const StepPlan& plan : loop.plans) EXPECT_FALSE(PlanHasExpertFields(plan));
    EXPECT_EQ(executor.num_routing_steps(), 0);
    EXPECT_EQ(scheduler.Stats().expert_cache.slots, 0);
  }
}

// With a cache every plan asks for the routing, the tokens are what each request makes alone,
// and every request that ends — finished or aborted — leaves its matrix in the collection.
TEST(SchedulerExpertsTest, EveryPlanAsksForRoutingAndEveryEndedRequestIsKept) {
  FakeExecutor executor(Moe(), Capacity(12));
  SchedulerConfig config;
  config.max_prefill_chunk = 3;
  Scheduler scheduler(config, Moe(), executor.capacity());
  ASSERT_NE(scheduler.expert_cache_driver(), nullptr);
  EXPECT_EQ(scheduler.expert_cache_driver()->policy().name(), "activation");
  std::mt19937 rng(3);
  Loop loop{scheduler, executor};
  std::vector<SchedRequest> requests;
  for (uint64_t id = 1; id <= 5; ++id) {
    SchedRequest r = Topic(id, static_cast<int32_t>(id % 3), 5 + static_cast<int32_t>(rng() % 6),
                           3 + static_cast<int32_t>(rng() % 4));
    requests.push_back(r);
    ASSERT_TRUE(scheduler.Add(r).ok());
  }
  loop.Step();
  loop.Step();
  scheduler.Abort(RequestId(5));  // it has routed a prefill chunk
  loop.RunToEnd();
  EXPECT_EQ(executor.num_routing_steps(), executor.num_steps());
  for (const StepPlan& plan : loop.plans) EXPECT_TRUE(plan.report_expert_routing);
  const TraceCollection& collection = scheduler.expert_cache_driver()->collection();
  EXPECT_EQ(collection.num_insertions(), 5);
  int32_t num_requests = 0;
  for (const TraceEntry& e : collection.entries()) num_requests += e.num_requests;
  EXPECT_EQ(num_requests, 5);
  for (uint64_t id = 1; id <= 5; ++id) {
    EXPECT_EQ(scheduler.expert_cache_driver()->RequestMatrix(RequestId(id)), nullptr);
  }
  // Routing steers the cache only: outputs are what the requests make alone.
  for (const SchedRequest& r : requests) {
    if (r.id == RequestId(5)) continue;
    EXPECT_EQ(loop.tokens[r.id.value()],
              ExpectedTokens(r.sampling.seed, r.prompt, r.max_new_tokens, {}, kVocab));
  }
}

// A request's matrix holds exactly its tokens' routing, prompt and decode: what it leaves in the
// collection matches its topic.
TEST(SchedulerExpertsTest, AFinishedRequestsMatrixIsItsRouting) {
  FakeExecutor executor(Moe(), Capacity(12));
  Scheduler scheduler(SchedulerConfig{}, Moe(), executor.capacity());
  Loop loop{scheduler, executor};
  // Prompt of six 2s, one generated token (sampled at the end of the prompt, never computed).
  loop.Run(Topic(1, 2, 6, 1));
  const TraceCollection& collection = scheduler.expert_cache_driver()->collection();
  ASSERT_EQ(collection.size(), 1);
  const ActivationMatrix& m = collection.entries()[0].matrix;
  EXPECT_EQ(m.total(), 6 * 2 * kLayers);
  for (int32_t l = 0; l < kLayers; ++l) {
    for (int32_t e : TopicExperts(2, l)) EXPECT_EQ(m.count({l, e}), 6) << l << "/" << e;
  }
}

// With "lru" the scores follow what the engine ran: the expert used longest ago scores lowest.
TEST(SchedulerExpertsTest, LruScoresPutTheLeastRecentlyUsedLowest) {
  FakeExecutor executor(Moe(), Capacity(16));
  SchedulerConfig config;
  config.expert_cache.policy = "lru";
  Scheduler scheduler(config, Moe(), executor.capacity());
  Loop loop{scheduler, executor};
  loop.Run(Topic(1, 0, 2, 1));  // topic 0, one step
  ASSERT_TRUE(scheduler.Add(Topic(2, 1, 2, 2)).ok());
  loop.Step();  // topic 1's prompt
  const StepPlan& plan = loop.Step();  // its decode token
  EXPECT_TRUE(plan.expert_prefetch.empty());  // lru never prefetches
  ASSERT_EQ(plan.expert_scores.size(), 16u);
  const auto lowest = std::min_element(
      plan.expert_scores.begin(), plan.expert_scores.end(),
      [](const ExpertScore& a, const ExpertScore& b) { return a.score < b.score; });
  // Topic 0's first expert of the first layer: accessed first, in the first step.
  EXPECT_EQ(lowest->key, (ExpertKey{0, TopicExperts(0, 0)[0]}));
  for (const ExpertScore& old_one : plan.expert_scores) {
    if (!InTopic(0, old_one.key)) continue;
    for (const ExpertScore& new_one : plan.expert_scores) {
      if (InTopic(1, new_one.key)) {
        EXPECT_LT(old_one.score, new_one.score);
      }
    }
  }
}

// Runs `history` (one request at a time), then a topic-0 request whose prompt is computed one
// token per step; returns the hints of its second plan (after it has routed one token).
ExpertPrefetchHints HintsForTopicZero(const std::vector<int32_t>& history) {
  FakeExecutor executor(Moe(), Capacity(6));
  SchedulerConfig config;
  config.max_prefill_chunk = 1;
  Scheduler scheduler(config, Moe(), executor.capacity());
  Loop loop{scheduler, executor};
  uint64_t id = 1;
  for (int32_t topic : history) loop.Run(Topic(id++, topic, 8, 1));
  EXPECT_TRUE(scheduler.Add(Topic(id, 0, 4, 1)).ok());
  loop.Step();
  return loop.Step().expert_prefetch;
}

// With "activation", a request whose topic was seen before gets that topic's experts hinted for
// the later layers as soon as its first token has routed, most urgent first; with the same
// amount of history but not of its topic, one token is too little evidence to hint them.
TEST(SchedulerExpertsTest, ActivationHintsASeenTopicsExpertsForLaterLayers) {
  const ExpertPrefetchHints seen = HintsForTopicZero({0, 1, 1, 1});
  ASSERT_FALSE(seen.empty());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_TRUE(InTopic(0, seen[i].key)) << seen[i].key;
    EXPECT_GE(seen[i].key.layer, 1) << seen[i].key;  // layer 0 runs first: on demand
    if (i > 0) {
      EXPECT_GE(seen[i - 1].urgency, seen[i].urgency);
    }
  }
  const ExpertPrefetchHints unseen = HintsForTopicZero({2, 1, 1, 1});
  for (const ExpertPrefetchHint& h : unseen) EXPECT_FALSE(InTopic(0, h.key)) << h.key;
}

// The engine's expert cache counters reach the scheduler's stats (what the server's metrics
// read); a result without them (slots 0) leaves the last ones.
TEST(SchedulerExpertsTest, EngineCountersReachTheStats) {
  FakeExecutor executor(Moe(), Capacity(6));
  Scheduler scheduler(SchedulerConfig{}, Moe(), executor.capacity());
  Loop loop{scheduler, executor};
  ExpertCacheCounters counters;
  counters.slots = 6;
  counters.resident = 5;
  counters.hits = 11;
  counters.prefetches_used = 2;
  counters.bytes_loaded = 4096;
  counters.load_seconds = 0.25;
  executor.set_expert_cache(counters);
  ASSERT_TRUE(scheduler.Add(Topic(1, 1, 3, 3)).ok());
  loop.Step();
  SchedulerStats stats = scheduler.Stats();
  EXPECT_EQ(stats.expert_cache.slots, 6);
  EXPECT_EQ(stats.expert_cache.resident, 5);
  EXPECT_EQ(stats.expert_cache.hits, 11);
  EXPECT_EQ(stats.expert_cache.prefetches_used, 2);
  EXPECT_EQ(stats.expert_cache.bytes_loaded, 4096);
  EXPECT_DOUBLE_EQ(stats.expert_cache.load_seconds, 0.25);
  executor.set_expert_cache({});
  loop.Step();
  EXPECT_EQ(scheduler.Stats().expert_cache.hits, 11);
}

// A routing record that does not fit the model is dropped; the step and the request go on.
TEST(SchedulerExpertsTest, AMalformedRoutingRecordIsIgnored) {
  ModelInfo model = Moe();
  FakeExecutor executor(model, Capacity(6));
  model.num_layers = kLayers + 1;  // the scheduler expects one row more than the engine sends
  model.sparse_layers.assign(kLayers + 1, true);
  Scheduler scheduler(SchedulerConfig{}, model, executor.capacity());
  Loop loop{scheduler, executor};
  const SchedRequest r = Topic(1, 1, 3, 3);
  loop.Run(r);
  EXPECT_EQ(scheduler.expert_cache_driver()->collection().size(), 0);  // nothing recorded
  EXPECT_EQ(loop.tokens[1], ExpectedTokens(r.sampling.seed, r.prompt, 3, {}, kVocab));
}

}  // namespace
}  // namespace loom
