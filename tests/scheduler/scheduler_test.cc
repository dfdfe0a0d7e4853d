#include "scheduler/scheduler.h"

#include <map>
#include <set>
#include <random>

#include "gtest/gtest.h"
#include "tests/scheduler/fake_executor.h"

namespace loom {
namespace {

using testing::ExpectedTokens;
using testing::FakeExecutor;

constexpr int32_t kVocab = 50;

std::pair<uint64_t, int32_t> Key(uint64_t request, int32_t choice) { return {request, choice}; }

ModelInfo Model() {
  ModelInfo info;
  info.vocab_size = kVocab;
  info.max_context_len = 512;
  return info;
}

KvCapacity Capacity(int32_t num_blocks, int32_t block_size = 4, int32_t budget = 64,
                    int32_t max_seqs = 16) {
  KvCapacity c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  return c;
}

std::vector<TokenId> Prompt(std::mt19937& rng, int len, int distinct = kVocab) {
  std::vector<TokenId> p;
  for (int i = 0; i < len; ++i) p.push_back(TokenId(static_cast<int32_t>(rng() % distinct)));
  return p;
}

SchedRequest Request(uint64_t id, std::vector<TokenId> prompt, int32_t max_new) {
  SchedRequest r;
  r.id = RequestId(id);
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new;
  r.sampling.seed = id * 1000;
  return r;
}

// Runs the loop until nothing is left, checking the invariants after every step; collects the
// tokens and finish reason of every choice.
struct Driver {
  Scheduler& scheduler;
  FakeExecutor& executor;
  std::map<std::pair<uint64_t, int32_t>, std::vector<TokenId>> tokens{};
  std::map<std::pair<uint64_t, int32_t>, FinishReason> finish{};
  std::map<std::pair<uint64_t, int32_t>, int32_t> cached{};
  std::map<std::pair<uint64_t, int32_t>, std::vector<std::pair<TokenId, float>>> prompt_logprobs{};
  // Per request: how many prompt log-probabilities had been reported when its first token came.
  std::map<uint64_t, size_t> prompt_logprobs_at_first_token{};
  int64_t now_ms = 0;

  void Step() {
    StepPlan plan = scheduler.Schedule(now_ms);
    absl::StatusOr<StepResult> result = executor.Execute(plan);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_TRUE(scheduler.Update(*result).ok());
    const absl::Status s = scheduler.CheckInvariants();
    ASSERT_TRUE(s.ok()) << s;
    Collect();
    now_ms += 10;
  }
  void Collect() {
    std::vector<ChoiceOutput> outs = scheduler.TakeOutputs();
    // As the server does: prompt log-probabilities of the whole batch first, then tokens.
    for (const ChoiceOutput& out : outs) {
      auto& lps = prompt_logprobs[std::make_pair(out.request_id.value(), out.index)];
      for (const PositionLogprobs& p : out.prompt_logprobs) {
        lps.emplace_back(p.token.token_id, p.token.logprob);
      }
    }
    for (ChoiceOutput& out : outs) {
      const auto key = std::make_pair(out.request_id.value(), out.index);
      if (!out.new_tokens.empty() && !prompt_logprobs_at_first_token.contains(key.first)) {
        prompt_logprobs_at_first_token[key.first] = prompt_logprobs[Key(key.first, 0)].size();
      }
      auto& t = tokens[key];
      t.insert(t.end(), out.new_tokens.begin(), out.new_tokens.end());
      cached[key] = std::max(cached[key], out.num_cached_tokens);
      if (out.finish != FinishReason::kNone) {
        ASSERT_FALSE(finish.contains(key)) << "finished twice";
        finish[key] = out.finish;
      }
    }
  }
  void RunToEnd(int max_steps = 100000) {
    for (int i = 0; i < max_steps && scheduler.HasWork(); ++i) {
      Step();
      if (::testing::Test::HasFatalFailure()) return;
    }
    ASSERT_FALSE(scheduler.HasWork()) << "did not finish";
  }
};

TEST(SchedulerTest, OneRequestRunsToItsLength) {
  SchedulerConfig config;
  FakeExecutor executor(Model(), Capacity(16));
  Scheduler scheduler(config, Model(), executor.capacity());
  std::mt19937 rng(1);
  SchedRequest r = Request(1, Prompt(rng, 10), 7);
  const auto expected = ExpectedTokens(r.sampling.seed, r.prompt, 7, {}, kVocab);
  ASSERT_TRUE(scheduler.Add(r).ok());
  Driver d{scheduler, executor};
  d.RunToEnd();
  EXPECT_EQ(d.tokens[Key(1, 0)], expected);
  EXPECT_EQ(d.finish[Key(1, 0)], FinishReason::kLength);
  EXPECT_EQ(scheduler.block_pool().num_free(), 16);
  EXPECT_EQ(executor.num_sequences(), 0u);
}

TEST(SchedulerTest, OutputsCarryWhenTheChoiceWasFirstScheduled) {
  SchedulerConfig config;
  config.max_num_seqs = 1;
  FakeExecutor executor(Model(), Capacity(16, 4, 64, 1));
  Scheduler scheduler(config, Model(), executor.capacity());
  std::mt19937 rng(11);
  ASSERT_TRUE(scheduler.Add(Request(1, Prompt(rng, 4), 2)).ok());
  ASSERT_TRUE(scheduler.Add(Request(2, Prompt(rng, 4), 2)).ok());
  std::map<uint64_t, int64_t> first;
  for (int64_t now = 100; scheduler.HasWork(); now += 10) {
    StepPlan plan = scheduler.Schedule(now);
    absl::StatusOr<StepResult> result = executor.Execute(plan);
    ASSERT_TRUE(result.ok());
    ASSERT_TRUE(scheduler.Update(*result).ok());
    for (const ChoiceOutput& out : scheduler.TakeOutputs()) {
      first[out.request_id.value()] = out.first_scheduled_ms;
    }
  }
  EXPECT_EQ(first[1], 100);
  EXPECT_EQ(first[2], 120);  // waited for request 1's two steps
}

TEST(SchedulerTest, StopTokenEndsTheChoiceAndIsKept) {
  FakeExecutor executor(Model(), Capacity(16));
  Scheduler scheduler(SchedulerConfig{}, Model(), executor.capacity());
  std::mt19937 rng(2);
  SchedRequest r = Request(1, Prompt(rng, 5), 30);
  const auto free_run = ExpectedTokens(r.sampling.seed, r.prompt, 30, {}, kVocab);
  r.stop_token_ids = {free_run[3]};
  ASSERT_TRUE(scheduler.Add(r).ok());
  Driver d{scheduler, executor};
  d.RunToEnd();
  const auto& got = d.tokens[Key(1, 0)];
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), free_run[3]);
  EXPECT_LE(got.size(), 4u);
  EXPECT_EQ(d.finish[Key(1, 0)], FinishReason::kStop);
}

TEST(SchedulerTest, ChunkedPrefillRespectsTheBudgetAndGivesTheSameTokens) {
  SchedulerConfig config;
  config.max_num_batched_tokens = 8;
  config.max_prefill_chunk = 5;
  FakeExecutor executor(Model(), Capacity(64, 4, 8));
  Scheduler scheduler(config, Model(), executor.capacity());
  std::mt19937 rng(3);
  std::vector<SchedRequest> reqs;
  for (uint64_t i = 1; i <= 4; ++i) {
    reqs.push_back(Request(i, Prompt(rng, 23), 6));
    ASSERT_TRUE(scheduler.Add(reqs.back()).ok());
  }
  Driver d{scheduler, executor};
  d.RunToEnd();
  for (const SchedRequest& r : reqs) {
    EXPECT_EQ((d.tokens[Key(r.id.value(), 0)]),
              ExpectedTokens(r.sampling.seed, r.prompt, 6, {}, kVocab));
  }
}

TEST(SchedulerTest, PrefixCacheHitIsReportedAndCorrect) {
  FakeExecutor executor(Model(), Capacity(32));
  Scheduler scheduler(SchedulerConfig{}, Model(), executor.capacity());
  std::mt19937 rng(4);
  std::vector<TokenId> shared = Prompt(rng, 12);
  SchedRequest a = Request(1, shared, 3);
  std::vector<TokenId> longer = shared;
  longer.push_back(TokenId(7));
  longer.push_back(TokenId(8));
  SchedRequest b = Request(2, longer, 3);
  ASSERT_TRUE(scheduler.Add(a).ok());
  Driver d{scheduler, executor};
  d.RunToEnd();
  ASSERT_TRUE(scheduler.Add(b).ok());
  d.RunToEnd();
  EXPECT_EQ(d.cached[Key(2, 0)], 12);
  EXPECT_EQ((d.tokens[Key(2, 0)]), ExpectedTokens(b.sampling.seed, longer, 3, {}, kVocab));
  const SchedulerStats stats = scheduler.Stats();
  EXPECT_EQ(stats.prefix_cache_hit_tokens, 12);
  EXPECT_EQ(stats.prefix_cache_queried_tokens, 12 + 14);
}

TEST(SchedulerTest, AFullyCachedPromptStillComputesItsLastToken) {
  FakeExecutor executor(Model(), Capacity(32));
  Scheduler scheduler(SchedulerConfig{}, Model(), executor.capacity());
  std::mt19937 rng(5);
  SchedRequest a = Request(1, Prompt(rng, 8), 2);
  SchedRequest b = a;
  b.id = RequestId(2);
  ASSERT_TRUE(scheduler.Add(a).ok());
  Driver d{scheduler, executor};
  d.RunToEnd();
  ASSERT_TRUE(scheduler.Add(b).ok());
  d.RunToEnd();
  EXPECT_EQ(d.cached[Key(2, 0)], 4);  // one full block; the block with the last token is recomputed
  EXPECT_EQ(d.tokens[Key(2, 0)], d.tokens[Key(1, 0)]);
}

TEST(SchedulerTest, ChoicesShareThePromptAndDrawWithTheirOwnSeeds) {
  FakeExecutor executor(Model(), Capacity(64));
  Scheduler scheduler(SchedulerConfig{}, Model(), executor.capacity());
  std::mt19937 rng(6);
  SchedRequest r = Request(1, Prompt(rng, 17), 5);
  r.n = 3;
  ASSERT_TRUE(scheduler.Add(r).ok());
  Driver d{scheduler, executor};
  d.RunToEnd();
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ((d.tokens[Key(1, i)]), ExpectedTokens(r.sampling.seed + i, r.prompt, 5, {}, kVocab));
    EXPECT_EQ((d.finish[Key(1, i)]), FinishReason::kLength);
  }
  EXPECT_EQ((d.cached[Key(1, 1)]), 16);
  EXPECT_EQ((d.cached[Key(1, 2)]), 16);
}

TEST(SchedulerTest, PreemptionUnderMemoryPressureKeepsEveryTokenRight) {
  SchedulerConfig config;
  config.max_num_batched_tokens = 32;
  // 12 blocks of 4: far less than 6 requests of 9 + 20 tokens need at once.
  FakeExecutor executor(Model(), Capacity(12, 4, 32));
  Scheduler scheduler(config, Model(), executor.capacity());
  std::mt19937 rng(7);
  std::vector<SchedRequest> reqs;
  for (uint64_t i = 1; i <= 6; ++i) {
    reqs.push_back(Request(i, Prompt(rng, 9), 20));
    ASSERT_TRUE(scheduler.Add(reqs.back()).ok());
  }
  Driver d{scheduler, executor};
  d.RunToEnd();
  EXPECT_GT(scheduler.Stats().num_preemptions, 0);
  for (const SchedRequest& r : reqs) {
    EXPECT_EQ((d.tokens[Key(r.id.value(), 0)]),
              ExpectedTokens(r.sampling.seed, r.prompt, 20, {}, kVocab));
  }
  EXPECT_EQ(scheduler.block_pool().num_free(), 12);
}

TEST(SchedulerTest, AMoreImportantArrivalPreemptsTheLeastImportant) {
  FakeExecutor executor(Model(), Capacity(8, 4, 64, 2));
  Scheduler scheduler(SchedulerConfig{}, Model(), executor.capacity());
  std::mt19937 rng(8);
  SchedRequest low1 = Request(1, Prompt(rng, 4), 12);
  SchedRequest low2 = Request(2, Prompt(rng, 4), 12);
  low1.priority = low2.priority = 5;
  ASSERT_TRUE(scheduler.Add(low1).ok());
  ASSERT_TRUE(scheduler.Add(low2).ok());
  Driver d{scheduler, executor};
  for (int i = 0; i < 3; ++i) d.Step();
  SchedRequest high = Request(3, Prompt(rng, 4), 2);
  high.priority = 0;
  ASSERT_TRUE(scheduler.Add(high).ok());
  d.Step();
  d.Step();
  EXPECT_EQ((d.finish[Key(3, 0)]), FinishReason::kLength);  // ran at once, in two steps
  EXPECT_FALSE((d.finish.contains(Key(1, 0))));
  EXPECT_GE(scheduler.Stats().num_preemptions, 1);
  d.RunToEnd();
  EXPECT_EQ((d.tokens[Key(2, 0)]), ExpectedTokens(low2.sampling.seed, low2.prompt, 12, {}, kVocab));
}

TEST(SchedulerTest, AbortAndDeadlineFreeEverything) {
  FakeExecutor executor(Model(), Capacity(64));
  Scheduler scheduler(SchedulerConfig{}, Model(), executor.capacity());
  std::mt19937 rng(9);
  SchedRequest a = Request(1, Prompt(rng, 6), 100);
  SchedRequest b = Request(2, Prompt(rng, 6), 100);
  b.deadline_ms = 35;
  SchedRequest c = Request(3, Prompt(rng, 6), 100);  // never runs: aborted while waiting
  ASSERT_TRUE(scheduler.Add(a).ok());
  ASSERT_TRUE(scheduler.Add(b).ok());
  Driver d{scheduler, executor};
  d.Step();
  d.Step();
  scheduler.Abort(RequestId(1));
  ASSERT_TRUE(scheduler.Add(c).ok());
  scheduler.Abort(RequestId(3));
  scheduler.Abort(RequestId(99));  // unknown: ignored
  d.RunToEnd();
  EXPECT_EQ((d.finish[Key(1, 0)]), FinishReason::kAbort);
  EXPECT_EQ((d.finish[Key(2, 0)]), FinishReason::kDeadline);
  EXPECT_EQ((d.finish[Key(3, 0)]), FinishReason::kAbort);
  EXPECT_EQ(scheduler.block_pool().num_free(), 64);
  EXPECT_EQ(executor.num_sequences(), 0u);
  EXPECT_EQ(scheduler.Stats().num_waiting_requests, 0);
}

TEST(SchedulerTest, AbortingOneChoiceLeavesTheOthers) {
  FakeExecutor executor(Model(), Capacity(64));
  Scheduler scheduler(SchedulerConfig{}, Model(), executor.capacity());
  std::mt19937 rng(12);
  SchedRequest r = Request(1, Prompt(rng, 9), 20);
  r.n = 3;
  ASSERT_TRUE(scheduler.Add(r).ok());
  Driver d{scheduler, executor};
  for (int i = 0; i < 4; ++i) d.Step();
  scheduler.AbortChoice(RequestId(1), 1);
  scheduler.AbortChoice(RequestId(1), 7);   // no such choice: ignored
  scheduler.AbortChoice(RequestId(9), 0);   // no such request: ignored
  d.RunToEnd();
  EXPECT_EQ(d.finish[Key(1, 1)], FinishReason::kAbort);
  EXPECT_LT(d.tokens[Key(1, 1)].size(), 20u);
  for (int32_t i : {0, 2}) {
    EXPECT_EQ(d.finish[Key(1, i)], FinishReason::kLength);
    EXPECT_EQ(d.tokens[Key(1, i)], ExpectedTokens(r.sampling.seed + i, r.prompt, 20, {}, kVocab));
  }
  EXPECT_EQ(scheduler.block_pool().num_free(), 64);
}

// Choices wait for the first to compute the prompt; if the first ends before that, the others
// must not wait forever.
TEST(SchedulerTest, ChoicesRunWhenTheFirstEndsBeforeItsPrompt) {
  FakeExecutor executor(Model(), Capacity(64));
  Scheduler scheduler(SchedulerConfig{}, Model(), executor.capacity());
  std::mt19937 rng(13);
  SchedRequest r = Request(1, Prompt(rng, 9), 4);
  r.n = 2;
  ASSERT_TRUE(scheduler.Add(r).ok());
  scheduler.AbortChoice(RequestId(1), 0);  // before any step
  Driver d{scheduler, executor};
  d.RunToEnd(200);
  EXPECT_EQ(d.finish[Key(1, 0)], FinishReason::kAbort);
  EXPECT_EQ(d.finish[Key(1, 1)], FinishReason::kLength);
  EXPECT_EQ(d.tokens[Key(1, 1)], ExpectedTokens(r.sampling.seed + 1, r.prompt, 4, {}, kVocab));
}

// Choice 0 scores the whole prompt (no prefix-cache hit, through chunking) and reports every
// position once, before any choice's first token; the other choices still share the cache.
TEST(SchedulerTest, PromptLogprobsCoverThePromptOnceBeforeAnyToken) {
  SchedulerConfig config;
  config.max_prefill_chunk = 3;
  FakeExecutor executor(Model(), Capacity(64));
  Scheduler scheduler(config, Model(), executor.capacity());
  std::mt19937 rng(14);
  const std::vector<TokenId> prompt = Prompt(rng, 10);
  ASSERT_TRUE(scheduler.Add(Request(1, prompt, 2)).ok());  // puts the prompt in the cache
  Driver d{scheduler, executor};
  d.RunToEnd();
  SchedRequest r = Request(2, prompt, 3);
  r.n = 3;
  r.sampling.prompt_logprobs = 1;
  ASSERT_TRUE(scheduler.Add(r).ok());
  d.RunToEnd();
  EXPECT_EQ(d.prompt_logprobs[Key(2, 0)], testing::ExpectedPromptLogprobs(prompt));
  EXPECT_EQ(d.prompt_logprobs_at_first_token[2], prompt.size() - 1);
  EXPECT_EQ(d.cached[Key(2, 0)], 0);
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(d.tokens[Key(2, i)], ExpectedTokens(r.sampling.seed + i, prompt, 3, {}, kVocab));
    if (i > 0) {
      EXPECT_TRUE(d.prompt_logprobs[Key(2, i)].empty());
      EXPECT_EQ(d.cached[Key(2, i)], 8);
    }
  }
  EXPECT_TRUE(d.prompt_logprobs[Key(1, 0)].empty());  // not asked for
}

// Without prefix caching the other choices still wait for choice 0's prompt scores.
TEST(SchedulerTest, PromptLogprobsComeFirstWithoutPrefixCaching) {
  SchedulerConfig config;
  config.enable_prefix_caching = false;
  config.max_prefill_chunk = 4;
  FakeExecutor executor(Model(), Capacity(64));
  Scheduler scheduler(config, Model(), executor.capacity());
  std::mt19937 rng(15);
  SchedRequest r = Request(1, Prompt(rng, 13), 2);
  r.n = 2;
  r.sampling.prompt_logprobs = 0;
  ASSERT_TRUE(scheduler.Add(r).ok());
  Driver d{scheduler, executor};
  d.Step();
  EXPECT_EQ(executor.num_sequences(), 1u);  // choice 1 waits for choice 0's prompt
  d.RunToEnd();
  EXPECT_EQ(d.prompt_logprobs[Key(1, 0)], testing::ExpectedPromptLogprobs(r.prompt));
  EXPECT_EQ(d.prompt_logprobs_at_first_token[1], r.prompt.size() - 1);
  EXPECT_EQ(d.tokens[Key(1, 1)], ExpectedTokens(r.sampling.seed + 1, r.prompt, 2, {}, kVocab));
}

// A sequence preempted half-way through its prompt recomputes it; no position is reported twice.
TEST(SchedulerTest, PromptLogprobsSurvivePreemptionMidPrompt) {
  SchedulerConfig config;
  config.max_prefill_chunk = 4;
  FakeExecutor executor(Model(), Capacity(16, 4, 64, 1));
  Scheduler scheduler(config, Model(), executor.capacity());
  std::mt19937 rng(16);
  SchedRequest low = Request(1, Prompt(rng, 12), 3);
  low.priority = 5;
  low.sampling.prompt_logprobs = 0;
  ASSERT_TRUE(scheduler.Add(low).ok());
  Driver d{scheduler, executor};
  d.Step();  // positions 0..3 scored
  ASSERT_EQ(d.prompt_logprobs[Key(1, 0)].size(), 4u);
  ASSERT_TRUE(scheduler.Add(Request(2, Prompt(rng, 4), 2)).ok());  // more important
  d.RunToEnd();
  EXPECT_GE(scheduler.Stats().num_preemptions, 1);
  EXPECT_EQ(d.prompt_logprobs[Key(1, 0)], testing::ExpectedPromptLogprobs(low.prompt));
  EXPECT_EQ(d.tokens[Key(1, 0)], ExpectedTokens(low.sampling.seed, low.prompt, 3, {}, kVocab));
}

// max_new_tokens 0: the prompt is computed and scored, nothing is generated, every choice ends
// with kLength.
TEST(SchedulerTest, MaxNewTokensZeroOnlyScoresThePrompt) {
  FakeExecutor executor(Model(), Capacity(64));
  Scheduler scheduler(SchedulerConfig{}, Model(), executor.capacity());
  std::mt19937 rng(17);
  SchedRequest r = Request(1, Prompt(rng, 9), 0);
  r.n = 2;
  r.sampling.prompt_logprobs = 2;
  ASSERT_TRUE(scheduler.Add(r).ok());
  SchedRequest plain = Request(2, Prompt(rng, 1), 0);  // one token: nothing to score
  plain.sampling.prompt_logprobs = 0;
  ASSERT_TRUE(scheduler.Add(plain).ok());
  Driver d{scheduler, executor};
  d.RunToEnd(50);
  EXPECT_EQ(d.prompt_logprobs[Key(1, 0)], testing::ExpectedPromptLogprobs(r.prompt));
  for (const auto& key : {Key(1, 0), Key(1, 1), Key(2, 0)}) {
    EXPECT_EQ(d.finish[key], FinishReason::kLength);
    EXPECT_TRUE(d.tokens[key].empty());
  }
  EXPECT_TRUE(d.prompt_logprobs[Key(2, 0)].empty());
  EXPECT_EQ(scheduler.block_pool().num_free(), 64);
  EXPECT_EQ(executor.num_sequences(), 0u);
}

TEST(SchedulerTest, AdmissionControlAndValidation) {
  SchedulerConfig config;
  config.max_waiting_requests = 2;
  config.max_waiting_prompt_tokens = 100;
  FakeExecutor executor(Model(), Capacity(64));
  Scheduler scheduler(config, Model(), executor.capacity());
  std::mt19937 rng(10);
  EXPECT_TRUE(scheduler.Add(Request(1, Prompt(rng, 10), 4)).ok());
  EXPECT_EQ(scheduler.Add(Request(1, Prompt(rng, 10), 4)).code(),
            absl::StatusCode::kInvalidArgument);  // duplicate id
  EXPECT_EQ(scheduler.Add(Request(2, Prompt(rng, 95), 4)).code(),
            absl::StatusCode::kResourceExhausted);  // prompt tokens
  EXPECT_TRUE(scheduler.Add(Request(3, Prompt(rng, 10), 4)).ok());
  EXPECT_EQ(scheduler.Add(Request(4, Prompt(rng, 10), 4)).code(),
            absl::StatusCode::kResourceExhausted);  // requests
  EXPECT_EQ(scheduler.Add(Request(5, {}, 4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler.Add(Request(6, Prompt(rng, 10), -1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler.Add(Request(7, Prompt(rng, 500), 20)).code(),
            absl::StatusCode::kInvalidArgument);  // past the context
  EXPECT_EQ(scheduler.Add(Request(8, {TokenId(kVocab)}, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler.Add(Request(9, Prompt(rng, 250), 20)).code(),
            absl::StatusCode::kInvalidArgument);  // more blocks than the cache
  Driver d{scheduler, executor};
  d.Step();  // both admitted: the queue has room again
  EXPECT_EQ(scheduler.Stats().num_waiting_requests, 0);
  EXPECT_TRUE(scheduler.Add(Request(4, Prompt(rng, 10), 4)).ok());
}

// Many requests with shared prefixes, priorities, several choices, chunking, deadlines, aborts
// and a cache small enough to force preemption: invariants hold after every step and every
// choice that ran to its end produced exactly what it produces alone.
TEST(SchedulerTest, RandomWorkloadsMatchRunningAlone) {
  int64_t preemptions = 0, hits = 0, deadlines = 0;
  for (uint32_t seed = 0; seed < 12; ++seed) {
    std::mt19937 rng(seed);
    SchedulerConfig config;
    config.max_num_batched_tokens = 8 + static_cast<int32_t>(rng() % 40);
    config.max_prefill_chunk = static_cast<int32_t>(rng() % 3) * 7;
    config.enable_prefix_caching = rng() % 4 != 0;
    FakeExecutor executor(Model(), Capacity(24 + rng() % 24, 1 + rng() % 5,
                                            config.max_num_batched_tokens, 2 + rng() % 8));
    Scheduler scheduler(config, Model(), executor.capacity());
    Driver d{scheduler, executor};
    std::vector<TokenId> common = Prompt(rng, 10, 3);
    std::map<uint64_t, SchedRequest> reqs;
    std::set<uint64_t> aborted;
    for (uint64_t id = 1; id <= 30; ++id) {
      std::vector<TokenId> p(common.begin(), common.begin() + rng() % 10);
      for (TokenId t : Prompt(rng, 1 + rng() % 12, 3)) p.push_back(t);
      SchedRequest r = Request(id, p, 1 + static_cast<int32_t>(rng() % 12));
      r.priority = static_cast<int32_t>(rng() % 3);
      r.n = 1 + static_cast<int32_t>(rng() % 3);
      r.stop_token_ids = {TokenId(static_cast<int32_t>(rng() % kVocab))};
      if (rng() % 8 == 0) r.deadline_ms = d.now_ms + 20 + rng() % 200;
      if (!scheduler.Add(r).ok()) continue;
      reqs[id] = r;
      d.Step();
      if (::testing::Test::HasFatalFailure()) return;
      if (rng() % 10 == 0) {
        scheduler.Abort(RequestId(id - rng() % id));
        aborted.insert(id);
      }
    }
    d.RunToEnd();
    if (::testing::Test::HasFatalFailure()) return;
    for (const auto& [id, r] : reqs) {
      for (int32_t i = 0; i < r.n; ++i) {
        const FinishReason f = d.finish[Key(id, i)];
        ASSERT_NE(f, FinishReason::kNone) << "seed " << seed << " request " << id;
        const auto expected = ExpectedTokens(r.sampling.seed + i, r.prompt, r.max_new_tokens,
                                             r.stop_token_ids, kVocab);
        const auto& got = d.tokens[Key(id, i)];
        if (f == FinishReason::kLength || f == FinishReason::kStop) {
          EXPECT_EQ(got, expected) << "seed " << seed << " request " << id << " choice " << i;
        } else {  // cut short: what it has is a prefix of what it would have produced
          ASSERT_LE(got.size(), expected.size());
          EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin()));
        }
      }
    }
    EXPECT_EQ(scheduler.block_pool().num_free(), scheduler.block_pool().num_blocks());
    EXPECT_EQ(executor.num_sequences(), 0u);
    preemptions += scheduler.Stats().num_preemptions;
    hits += scheduler.Stats().prefix_cache_hit_tokens;
    for (const auto& [key, f] : d.finish) deadlines += f == FinishReason::kDeadline ? 1 : 0;
  }
  // The workloads really exercise what they are meant to.
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(hits, 0);
  EXPECT_GT(deadlines, 0);
}

}  // namespace
}  // namespace loom
