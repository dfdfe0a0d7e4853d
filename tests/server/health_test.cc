// Liveness and readiness (server/serving/health.h): the pure decisions on hand-made snapshots,
// and the engine loop's snapshot on an injected clock with an executor that hangs or keeps
// failing, so the probes turn red exactly when the loop is stuck or cannot step.
#include "server/serving/health.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/scheduler/fake_executor.h"

namespace loom {
namespace {

using testing::FakeExecutor;

HealthOptions Options() {
  HealthOptions o;
  o.step_timeout_ms = 60000;
  o.max_consecutive_failed_steps = 3;
  o.max_waiting_requests = 4;
  o.max_waiting_prompt_tokens = 100;
  return o;
}

bool Mentions(const absl::Status& s, std::string_view part) {
  return std::string(s.message()).find(part) != std::string::npos;
}

TEST(HealthTest, AnIdleLoopIsLiveHoweverLongAgoItLastStepped) {
  EngineLoopStats stats;
  stats.idle = true;
  stats.last_progress_ms = 0;
  EXPECT_TRUE(CheckLiveness(stats, 10'000'000, Options()).ok());
}

TEST(HealthTest, ABusyLoopWithoutAStepWithinTheBoundIsNotLive) {
  EngineLoopStats stats;
  stats.idle = false;
  stats.last_progress_ms = 1000;
  EXPECT_TRUE(CheckLiveness(stats, 61000, Options()).ok());
  const absl::Status stuck = CheckLiveness(stats, 61001, Options());
  EXPECT_EQ(stuck.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Mentions(stuck, "no step returned for 60001 ms")) << stuck;
}

TEST(HealthTest, StepsThatKeepFailingOrALostDeviceAreNotLive) {
  EngineLoopStats stats;
  stats.num_consecutive_failed_steps = 2;
  EXPECT_TRUE(CheckLiveness(stats, 0, Options()).ok());
  stats.num_consecutive_failed_steps = 3;
  EXPECT_TRUE(Mentions(CheckLiveness(stats, 0, Options()), "last 3 engine steps failed"));
  EngineLoopStats lost;
  lost.device_lost = true;
  EXPECT_TRUE(Mentions(CheckLiveness(lost, 0, Options()), "device was lost"));
}

TEST(HealthTest, ReadyOnlyWhenWarmNotDrainingLiveAndBelowTheAdmissionCaps) {
  EngineLoopStats stats;
  ServingState state;
  EXPECT_TRUE(Mentions(CheckReadiness(stats, 0, state, Options()), "warming up"));
  state.warmed_up = true;
  EXPECT_TRUE(CheckReadiness(stats, 0, state, Options()).ok());
  state.draining = true;
  EXPECT_TRUE(Mentions(CheckReadiness(stats, 0, state, Options()), "draining"));
  state.draining = false;
  stats.scheduler.num_waiting_requests = 4;
  EXPECT_TRUE(Mentions(CheckReadiness(stats, 0, state, Options()), "4 requests"));
  stats.scheduler.num_waiting_requests = 3;
  stats.scheduler.num_waiting_prompt_tokens = 100;
  EXPECT_TRUE(Mentions(CheckReadiness(stats, 0, state, Options()), "100 prompt tokens"));
  stats.scheduler.num_waiting_prompt_tokens = 99;
  EXPECT_TRUE(CheckReadiness(stats, 0, state, Options()).ok());
  // No caps configured: any queue is fine.
  HealthOptions uncapped = Options();
  uncapped.max_waiting_requests = 0;
  uncapped.max_waiting_prompt_tokens = 0;
  stats.scheduler.num_waiting_requests = 1 << 20;
  stats.scheduler.num_waiting_prompt_tokens = int64_t{1} << 40;
  EXPECT_TRUE(CheckReadiness(stats, 0, state, uncapped).ok());
  // A stuck engine is not ready either.
  stats.num_consecutive_failed_steps = 3;
  EXPECT_TRUE(Mentions(CheckReadiness(stats, 0, state, uncapped), "failed"));
}

TEST(HealthTest, OptionsComeFromTheConfiguration) {
  ServerConfig config;
  config.livez_step_timeout_s = 7;
  config.livez_max_failed_steps = 9;
  config.max_waiting_requests = 11;
  config.max_waiting_prompt_tokens = 13;
  const HealthOptions o = HealthOptionsFor(config);
  EXPECT_EQ(o.step_timeout_ms, 7000);
  EXPECT_EQ(o.max_consecutive_failed_steps, 9);
  EXPECT_EQ(o.max_waiting_requests, 11);
  EXPECT_EQ(o.max_waiting_prompt_tokens, 13);
}

ModelInfo Model() {
  ModelInfo info;
  info.vocab_size = 64;
  info.max_context_len = 256;
  return info;
}

KvCapacity Capacity() {
  KvCapacity c;
  c.num_blocks = 32;
  c.block_size = 4;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  return c;
}

SchedRequest Request(uint64_t id) {
  SchedRequest r;
  r.id = RequestId(id);
  r.prompt = {TokenId(1), TokenId(2), TokenId(3)};
  r.max_new_tokens = 2;
  return r;
}

// Every step waits until the test opens the gate: a device that hangs.
class HangingExecutor : public FakeExecutor {
 public:
  HangingExecutor() : FakeExecutor(Model(), Capacity()) {}
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++num_entered_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    }
    return FakeExecutor::Execute(plan);
  }
  void WaitUntilEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return num_entered_ > 0; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int num_entered_ = 0;
  bool open_ = false;
};

void WaitUntilIdle(const EngineLoop& loop) {
  for (int i = 0; i < 1000 && !loop.Stats().idle; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

TEST(HealthTest, AnEngineLoopStuckInAStepFailsLivenessOnItsClock) {
  std::atomic<int64_t> now{1000};
  HangingExecutor executor;
  EngineLoop loop(executor, SchedulerConfig{}, [&] { return now.load(); });
  WaitUntilIdle(loop);
  ASSERT_TRUE(loop.Stats().idle);
  now = 500'000;  // idle for long: still live
  EXPECT_TRUE(CheckLiveness(loop.Stats(), now, Options()).ok());
  std::shared_ptr<RequestStream> stream = loop.Submit(Request(1));
  executor.WaitUntilEntered();
  EXPECT_FALSE(loop.Stats().idle);
  EXPECT_TRUE(CheckLiveness(loop.Stats(), now + 60000, Options()).ok());
  now += 60001;
  const absl::Status stuck = CheckLiveness(loop.Stats(), now, Options());
  EXPECT_EQ(stuck.code(), absl::StatusCode::kUnavailable) << stuck;
  executor.Open();
  for (;;) {
    if (stream->Wait(absl::Seconds(10)).done) break;
  }
  WaitUntilIdle(loop);
  EXPECT_TRUE(CheckLiveness(loop.Stats(), now + 1'000'000, Options()).ok());
}

// Every step is refused (a device that keeps failing non-fatally).
class FailingExecutor : public FakeExecutor {
 public:
  FailingExecutor() : FakeExecutor(Model(), Capacity()) {}
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override {
    if (plan.new_sequences.empty() && plan.continuing.empty()) return FakeExecutor::Execute(plan);
    return absl::InternalError("the device keeps failing");
  }
};

TEST(HealthTest, AnEngineLoopWhoseStepsKeepFailingIsNotLive) {
  FailingExecutor executor;
  EngineLoop loop(executor, SchedulerConfig{}, [] { return int64_t{0}; });
  for (uint64_t id = 1; id <= 3; ++id) {
    std::shared_ptr<RequestStream> stream = loop.Submit(Request(id));
    StreamBatch batch;
    while (!(batch = stream->Wait(absl::Seconds(10))).done) {
    }
    EXPECT_FALSE(batch.error.ok());
    if (id < 3) {
      EXPECT_TRUE(CheckLiveness(loop.Stats(), 0, Options()).ok()) << id;
    }
  }
  WaitUntilIdle(loop);
  const EngineLoopStats stats = loop.Stats();
  EXPECT_EQ(stats.num_consecutive_failed_steps, 3);
  EXPECT_TRUE(Mentions(CheckLiveness(stats, 0, Options()), "last 3 engine steps failed"));
}

}  // namespace
}  // namespace loom
