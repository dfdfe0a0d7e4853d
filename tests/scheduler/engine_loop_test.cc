#include "scheduler/engine_loop.h"

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "tests/scheduler/fake_executor.h"

namespace loom {
namespace {

using testing::ExpectedTokens;
using testing::FakeExecutor;

constexpr int32_t kVocab = 64;

ModelInfo Model() {
  ModelInfo info;
  info.vocab_size = kVocab;
  info.max_context_len = 1024;
  return info;
}

KvCapacity Capacity(int32_t num_blocks) {
  KvCapacity c;
  c.num_blocks = num_blocks;
  c.block_size = 4;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  return c;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

SchedRequest Request(uint64_t id, int32_t prompt_len, int32_t max_new, int32_t n = 1) {
  SchedRequest r;
  r.id = RequestId(id);
  for (int32_t i = 0; i < prompt_len; ++i) r.prompt.push_back(TokenId((i * 7 + id) % kVocab));
  r.max_new_tokens = max_new;
  r.sampling.seed = id;
  r.n = n;
  return r;
}

// Reads a stream to its end; returns the tokens per choice and the final status.
struct Collected {
  std::map<int32_t, std::vector<TokenId>> tokens;
  std::map<int32_t, FinishReason> finish;
  absl::Status error;
};

Collected ReadAll(RequestStream& stream) {
  Collected c;
  for (;;) {
    StreamBatch batch = stream.Wait(absl::Seconds(10));
    for (ChoiceOutput& out : batch.outputs) {
      auto& t = c.tokens[out.index];
      t.insert(t.end(), out.new_tokens.begin(), out.new_tokens.end());
      if (out.finish != FinishReason::kNone) c.finish[out.index] = out.finish;
    }
    if (batch.done) {
      c.error = batch.error;
      return c;
    }
  }
}

TEST(EngineLoopTest, ManyClientsOnManyThreadsGetTheirOwnTokens) {
  FakeExecutor executor(Model(), Capacity(40));
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  std::vector<std::thread> clients;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      for (int k = 0; k < 10; ++k) {
        const uint64_t id = 100 * t + k + 1;
        SchedRequest r = Request(id, 3 + (k * 5) % 17, 2 + k % 9, 1 + k % 2);
        const SchedRequest copy = r;
        std::shared_ptr<RequestStream> stream = loop.Submit(std::move(r));
        Collected c = ReadAll(*stream);
        for (int32_t i = 0; i < copy.n; ++i) {
          const auto expected =
              ExpectedTokens(copy.sampling.seed + i, copy.prompt, copy.max_new_tokens, {}, kVocab);
          if (!c.error.ok() || c.tokens[i] != expected || c.finish[i] != FinishReason::kLength) {
            ++mismatches;
          }
        }
      }
    });
  }
  for (std::thread& c : clients) c.join();
  EXPECT_EQ(mismatches.load(), 0);
  const EngineLoopStats stats = loop.Stats();
  EXPECT_GT(stats.num_steps, 0);
  EXPECT_EQ(stats.num_failed_steps, 0);
  loop.Stop();
  EXPECT_EQ(executor.num_sequences(), 0u);
}

TEST(EngineLoopTest, AnAdmittedRequestIsMarkedAcceptedBeforeItsTokens) {
  FakeExecutor executor(Model(), Capacity(16));
  executor.set_step_delay(std::chrono::milliseconds(30));
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  std::shared_ptr<RequestStream> stream = loop.Submit(Request(1, 4, 3));
  StreamBatch first = stream->Wait(absl::Seconds(10));
  EXPECT_TRUE(first.accepted);
  EXPECT_TRUE(first.error.ok());
  size_t first_tokens = 0;
  for (const ChoiceOutput& o : first.outputs) first_tokens += o.new_tokens.size();
  Collected rest = ReadAll(*stream);
  EXPECT_EQ(first_tokens + rest.tokens[0].size(), 3u);
  std::shared_ptr<RequestStream> refused = loop.Submit(Request(2, 0, 3));
  StreamBatch r = refused->Wait(absl::Seconds(10));
  EXPECT_FALSE(r.accepted);
  EXPECT_TRUE(r.done);
  EXPECT_FALSE(r.error.ok());
}

TEST(EngineLoopTest, RefusedRequestsGetTheirReasonAndOthersGoOn) {
  FakeExecutor executor(Model(), Capacity(16));
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  Collected bad = ReadAll(*loop.Submit(Request(1, 0, 4)));
  EXPECT_EQ(bad.error.code(), absl::StatusCode::kInvalidArgument);
  Collected huge = ReadAll(*loop.Submit(Request(2, 100, 4)));  // more blocks than the cache
  EXPECT_EQ(huge.error.code(), absl::StatusCode::kInvalidArgument);
  Collected good = ReadAll(*loop.Submit(Request(3, 5, 4)));
  EXPECT_TRUE(good.error.ok());
  EXPECT_EQ(good.tokens[0].size(), 4u);
  EXPECT_EQ(loop.Stats().num_rejected, 2);
}

TEST(EngineLoopTest, AbortEndsARequestAndFreesItsBlocks) {
  FakeExecutor executor(Model(), Capacity(64));
  executor.set_step_delay(std::chrono::milliseconds(2));  // 200 tokens take 400 ms
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  std::shared_ptr<RequestStream> stream = loop.Submit(Request(1, 8, 200));
  // Wait for the first tokens, then abort.
  StreamBatch first;
  while (first.outputs.empty() && !first.done) first = stream->Wait(absl::Seconds(10));
  ASSERT_FALSE(first.outputs.empty());
  loop.Abort(RequestId(1));
  Collected rest = ReadAll(*stream);
  EXPECT_EQ(rest.finish[0], FinishReason::kAbort);
  // The loop keeps serving, and the aborted request's blocks came back.
  Collected next = ReadAll(*loop.Submit(Request(2, 8, 3)));
  EXPECT_EQ(next.finish[0], FinishReason::kLength);
  EXPECT_EQ(loop.Stats().scheduler.num_free_blocks, 64);
}

TEST(EngineLoopTest, AnIdleLoopsStatsShowWhatACommandChanged) {
  FakeExecutor executor(Model(), Capacity(64));
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  auto run = [&](std::function<void(Scheduler&)> fn) {
    std::promise<void> done;
    loop.Post([&](LoopAccess& a) {
      fn(a.scheduler());
      done.set_value();
    });
    done.get_future().wait();
  };
  uint64_t reservation = 0;
  run([&](Scheduler& s) { reservation = s.Reserve(0, 10, NowMs()).value(); });
  // No step runs (nothing to compute), and the reserved blocks are not free.
  auto free_blocks = [&] {
    for (int i = 0; i < 1000; ++i) {
      if (loop.Stats().idle) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return loop.Stats().scheduler.num_free_blocks;
  };
  EXPECT_EQ(free_blocks(), 54);
  EXPECT_EQ(loop.Stats().num_steps, 0);
  run([&](Scheduler& s) { s.ReleaseReservation(reservation); });
  EXPECT_EQ(free_blocks(), 64);
}

TEST(EngineLoopTest, AConsumerThatNeverReadsDoesNotHoldUpOthers) {
  FakeExecutor executor(Model(), Capacity(64));
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  std::shared_ptr<RequestStream> ignored = loop.Submit(Request(1, 4, 200));
  Collected c = ReadAll(*loop.Submit(Request(2, 4, 20)));
  EXPECT_EQ(c.tokens[0].size(), 20u);
  loop.Abort(RequestId(1));
  // Everything the loop produced for the unread stream waited there, whether it ran to its
  // length or was cut short by the abort.
  Collected abandoned = ReadAll(*ignored);
  EXPECT_TRUE(abandoned.error.ok());
  EXPECT_NE(abandoned.finish[0], FinishReason::kNone);
  EXPECT_EQ(abandoned.tokens[0].size() == 200, abandoned.finish[0] == FinishReason::kLength);
}

TEST(EngineLoopTest, NotifierFiresOnTheLoopThread) {
  FakeExecutor executor(Model(), Capacity(16));
  executor.set_step_delay(std::chrono::milliseconds(20));  // the notifier is set before step 1 ends
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  std::atomic<int> calls{0};
  std::shared_ptr<RequestStream> stream;
  {
    SchedRequest r = Request(1, 4, 5);
    stream = loop.Submit(std::move(r));
    stream->SetNotifier([&] { ++calls; });
  }
  Collected c = ReadAll(*stream);
  EXPECT_EQ(c.tokens[0].size(), 5u);
  EXPECT_GE(calls.load(), 1);
}

// An executor that fails every step containing a given sequence's prompt token: only that
// request fails, with the executor's message; the loop keeps serving.
class FlakyExecutor : public FakeExecutor {
 public:
  using FakeExecutor::FakeExecutor;
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override {
    for (const NewSequencePlan& p : plan.new_sequences) {
      if (p.token_ids[0] == TokenId(kVocab - 1)) {
        return absl::InternalError("device lost the step");
      }
    }
    return FakeExecutor::Execute(plan);
  }
};

TEST(EngineLoopTest, AFailedStepFailsOnlyItsRequests) {
  FlakyExecutor executor(Model(), Capacity(32));
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  SchedRequest poison = Request(1, 4, 5);
  poison.prompt[0] = TokenId(kVocab - 1);
  Collected bad = ReadAll(*loop.Submit(poison));
  EXPECT_EQ(bad.error.code(), absl::StatusCode::kInternal);
  EXPECT_NE(bad.error.message().find("device lost"), std::string::npos);
  Collected good = ReadAll(*loop.Submit(Request(2, 4, 5)));
  EXPECT_TRUE(good.error.ok());
  EXPECT_EQ(good.tokens[0].size(), 5u);
  EXPECT_GE(loop.Stats().num_failed_steps, 1);
  // The good request's steps succeeded after the failure.
  EXPECT_EQ(loop.Stats().num_consecutive_failed_steps, 0);
}

// A fault-injecting wrapper: once, in the first step that releases a sequence while others
// continue, it lets the plan run (the engine state advances: the release is done, the
// sequences computed) and then reports a failure after the fact, touching only the first
// continuing sequence.
class FailsAfterApplyExecutor : public FakeExecutor {
 public:
  using FakeExecutor::FakeExecutor;
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override {
    absl::StatusOr<StepResult> result = FakeExecutor::Execute(plan);
    if (!result.ok() || fired_ || plan.finished.empty() || plan.continuing.size() < 2) {
      return result;
    }
    fired_ = true;
    const std::vector<SequenceId> touched = {plan.continuing[0].seq_id};
    return MarkStepApplied(absl::InternalError("device fault after the step ran"), touched);
  }
  bool fired() const { return fired_; }

 private:
  bool fired_ = false;
};

TEST(EngineLoopTest, AFailureAfterTheEngineAppliedAStepEndsOnlyTheTouchedRequest) {
  FailsAfterApplyExecutor executor(Model(), Capacity(64));
  executor.set_step_delay(std::chrono::microseconds(500));
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  const SchedRequest first = Request(1, 5, 40);
  const SchedRequest second = Request(2, 6, 40);
  std::shared_ptr<RequestStream> first_stream = loop.Submit(first);
  std::shared_ptr<RequestStream> second_stream = loop.Submit(second);
  // Ends after two tokens while the others still run: the step after it releases its sequence.
  Collected shortest = ReadAll(*loop.Submit(Request(3, 4, 2)));
  Collected touched = ReadAll(*first_stream);
  Collected bystander = ReadAll(*second_stream);
  ASSERT_TRUE(executor.fired());
  EXPECT_TRUE(shortest.error.ok()) << shortest.error;
  EXPECT_EQ(shortest.tokens[0].size(), 2u);
  EXPECT_EQ(touched.error.code(), absl::StatusCode::kInternal);
  EXPECT_NE(touched.error.message().find("device fault after the step ran"), std::string::npos);
  // The other request in the failed step recomputes and produces exactly its own tokens.
  EXPECT_TRUE(bystander.error.ok()) << bystander.error;
  EXPECT_EQ(bystander.tokens[0], ExpectedTokens(second.sampling.seed, second.prompt, 40, {},
                                                kVocab));
  // Later requests are served, and the loop settles: one failed step, no spinning.
  Collected later = ReadAll(*loop.Submit(Request(4, 4, 5)));
  EXPECT_TRUE(later.error.ok()) << later.error;
  EXPECT_EQ(later.tokens[0].size(), 5u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const EngineLoopStats stats = loop.Stats();
  EXPECT_EQ(stats.num_failed_steps, 1);
  EXPECT_EQ(stats.num_consecutive_failed_steps, 0);
  EXPECT_TRUE(stats.idle);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(loop.Stats().num_steps, stats.num_steps);
  EXPECT_EQ(stats.scheduler.num_free_blocks, 64);
  // The engine dropped every sequence, the touched one included.
  EXPECT_EQ(executor.num_sequences(), 0u);
}

// An executor whose device is lost at the first step with a given prompt token: every request
// fails, the poisoned one and the ones merely running beside it, and later ones are refused.
class LostDeviceExecutor : public FakeExecutor {
 public:
  using FakeExecutor::FakeExecutor;
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override {
    for (const NewSequencePlan& p : plan.new_sequences) {
      if (p.token_ids[0] == TokenId(kVocab - 1)) {
        return MarkFatalDeviceError(absl::InternalError("an illegal memory access"));
      }
    }
    // Slow enough that the bystander is still running when the poisoned request arrives.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return FakeExecutor::Execute(plan);
  }
};

TEST(EngineLoopTest, AFatalDeviceErrorFailsEverythingAndCallsTheHandler) {
  LostDeviceExecutor executor(Model(), Capacity(512));
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  std::atomic<int> handler_calls{0};
  loop.SetFatalHandler([&](const absl::Status& error) {
    EXPECT_TRUE(IsFatalDeviceError(error));
    ++handler_calls;
  });
  std::shared_ptr<RequestStream> bystander = loop.Submit(Request(1, 4, 1000));
  // Let the bystander start before the poisoned request arrives.
  for (int i = 0; i < 1000 && bystander->Wait(absl::Seconds(10)).outputs.empty(); ++i) {
  }
  SchedRequest poison = Request(2, 4, 5);
  poison.prompt[0] = TokenId(kVocab - 1);
  Collected bad = ReadAll(*loop.Submit(poison));
  EXPECT_NE(bad.error.message().find("illegal memory access"), std::string::npos) << bad.error;
  Collected other = ReadAll(*bystander);
  EXPECT_NE(other.error.message().find("illegal memory access"), std::string::npos)
      << other.error;
  Collected late = ReadAll(*loop.Submit(Request(3, 4, 4)));
  EXPECT_FALSE(late.error.ok());
  // The handler runs right after the streams are failed, on the loop's thread.
  for (int i = 0; i < 1000 && handler_calls.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(handler_calls.load(), 1);
  EXPECT_TRUE(loop.Stats().device_lost);
  EXPECT_FALSE(IsFatalDeviceError(absl::InternalError("plain")));
}

TEST(EngineLoopTest, StopEndsEverythingAndRefusesNewWork) {
  FakeExecutor executor(Model(), Capacity(64));
  auto loop = std::make_unique<EngineLoop>(executor, SchedulerConfig{}, NowMs);
  std::shared_ptr<RequestStream> running = loop->Submit(Request(1, 4, 100));
  loop->Stop();
  Collected c = ReadAll(*running);
  EXPECT_TRUE(c.error.code() == absl::StatusCode::kUnavailable ||
              c.finish[0] != FinishReason::kNone);
  Collected late = ReadAll(*loop->Submit(Request(2, 4, 4)));
  EXPECT_EQ(late.error.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(executor.num_sequences(), 0u);
}

// An MoE model with an expert cache: the loop asks for the routing in every step, the tokens
// are unchanged, and the engine's expert cache counters reach the loop's stats (what /metrics
// reads).
TEST(EngineLoopTest, ExpertCacheCountersReachTheStats) {
  ModelInfo model = Model();
  model.num_layers = 2;
  model.num_experts = 4;
  model.num_experts_per_tok = 2;
  KvCapacity capacity = Capacity(16);
  capacity.expert_cache_slots = 3;
  FakeExecutor executor(model, capacity);
  ExpertCacheCounters counters;
  counters.slots = 3;
  counters.misses = 9;
  counters.prefetches_issued = 4;
  executor.set_expert_cache(counters);
  EngineLoop loop(executor, SchedulerConfig{}, NowMs);
  const SchedRequest r = Request(1, 6, 5);
  const Collected c = ReadAll(*loop.Submit(r));
  ASSERT_TRUE(c.error.ok()) << c.error;
  EXPECT_EQ(c.tokens.at(0), ExpectedTokens(r.sampling.seed, r.prompt, 5, {}, kVocab));
  const EngineLoopStats stats = loop.Stats();
  EXPECT_EQ(stats.scheduler.expert_cache.slots, 3);
  EXPECT_EQ(stats.scheduler.expert_cache.misses, 9);
  EXPECT_EQ(stats.scheduler.expert_cache.prefetches_issued, 4);
  loop.Stop();  // the executor's counters are the loop thread's until it has stopped
  EXPECT_GT(executor.num_routing_steps(), 0);
  EXPECT_EQ(executor.num_routing_steps(), executor.num_steps());
}

}  // namespace
}  // namespace loom
