// The engine loop of shared/ARCHITECTURE.md §3: one thread owns the Scheduler and drives the
// Executor; requests and aborts arrive through an inbox, outputs leave through RequestStreams.
//
//   loop: drain the inbox -> Schedule -> Execute -> Update -> push outputs to streams
//
// The loop never waits on a consumer. When it has nothing to do it sleeps until the inbox gets
// something. A step the executor fails ends only the requests in that step (their streams get
// the error); the loop keeps serving the rest. Execute is all or nothing (engine/api/executor.h):
// a refused plan left the engine unchanged, so its releases are repeated; a failure after the
// engine applied the plan (MarkStepApplied) ends exactly the requests of the sequences it
// touched, the others in the step wait again, and the plan is never sent again. The exception
// is a fatal device error (IsFatalDeviceError): the device is lost, so every request fails with
// it, later submissions are refused, the loop stops and calls the fatal handler (loomd exits for
// its supervisor). Stats carry what liveness needs: whether the loop is idle, when it last made
// progress, how many steps in a row failed.
//
// Thread safety: Submit, Abort, Stats and Stop may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/api/executor.h"
#include "scheduler/request_stream.h"
#include "scheduler/scheduler.h"

namespace loom {

// Counters and a scheduler snapshot, refreshed after every step.
struct EngineLoopStats {
  SchedulerStats scheduler;
  int64_t num_steps = 0;
  int64_t num_failed_steps = 0;
  // Failed steps since the last step that computed tokens and succeeded.
  int64_t num_consecutive_failed_steps = 0;
  int64_t num_rejected = 0;  // refused at admission
  bool device_lost = false;  // a fatal device error stopped the loop
  // The loop is asleep: nothing queued, nothing to schedule (false while it starts).
  bool idle = true;
  // On the loop's clock: when a step last returned (succeeded or failed), or the loop last woke
  // up with work, whichever is later. A loop that is not idle and has not made progress for long
  // is stuck (liveness).
  int64_t last_progress_ms = 0;
};

class EngineLoop;

// What a command posted to the loop (EngineLoop::Post) may touch, on the loop thread between
// steps. The cluster's migration protocol works through it.
class LoopAccess {
 public:
  Scheduler& scheduler() { return scheduler_; }
  int64_t now_ms() const { return now_ms_; }
  // The request's stream leaves the loop, which publishes nothing more to it (a migration
  // committed elsewhere: the caller relays the destination's outputs into it). Null if the loop
  // has no stream for `id`.
  std::shared_ptr<RequestStream> DetachStream(RequestId id);
  // Outputs of request `id` (already added to the scheduler) go to `stream` from now on.
  void AttachStream(RequestId id, std::shared_ptr<RequestStream> stream, int32_t num_choices);
  // Calls `done` on the loop thread once the next step has run (or at once, when there is no
  // work to step): true when that step's plan ran, false when it failed or the loop stopped.
  // Transfers the command queued travel in that step.
  void AfterNextStep(std::function<void(bool ok)> done);

 private:
  friend class EngineLoop;
  LoopAccess(EngineLoop& loop, Scheduler& scheduler, int64_t now_ms)
      : loop_(loop), scheduler_(scheduler), now_ms_(now_ms) {}
  EngineLoop& loop_;
  Scheduler& scheduler_;
  int64_t now_ms_;
};

class EngineLoop {
 public:
  using Clock = std::function<int64_t()>;  // milliseconds, monotonic

  // `executor` must outlive the loop. The thread starts at construction.
  EngineLoop(Executor& executor, const SchedulerConfig& config, Clock clock);
  ~EngineLoop();  // Stop()

  // Queues a request; its stream reports tokens, finishes, or why it was refused (the
  // scheduler's Add status: InvalidArgument or ResourceExhausted).
  std::shared_ptr<RequestStream> Submit(SchedRequest request);
  // The same with a stream the caller made (RequestStream(request.id, request.n)).
  void SubmitTo(SchedRequest request, std::shared_ptr<RequestStream> stream);

  // Ends a request with FinishReason::kAbort (client gone); its blocks are freed at the next
  // step. Unknown or finished ids are ignored.
  void Abort(RequestId id);
  // Ends one choice of a request (Scheduler::AbortChoice).
  void AbortChoice(RequestId id, int32_t index);

  EngineLoopStats Stats() const;

  // Runs `command` on the loop thread before the next step (commands run in order). Commands
  // left when the loop stops are dropped unrun (their owners see no AfterNextStep callback
  // other than false).
  using Command = std::function<void(LoopAccess&)>;
  void Post(Command command);
  // Called with every Abort, on the caller's thread (before the loop sees it): the cluster
  // forwards aborts of requests that now run elsewhere.
  void SetAbortListener(std::function<void(RequestId)> listener);

  // Called once, on the loop's thread, after a fatal device error has failed every request.
  using FatalHandler = std::function<void(const absl::Status&)>;
  void SetFatalHandler(FatalHandler handler);

  // Aborts everything still queued or running and joins the thread. Idempotent.
  void Stop();

 private:
  struct Submission {
    SchedRequest request;
    std::shared_ptr<RequestStream> stream;
  };

  void Run();
  bool DrainInbox();  // false when stopping
  void RunOneStep();
  // Runs the waiting KV transfers as a plan of their own (no forward pass).
  void RunTransferStep();
  void Publish(std::vector<ChoiceOutput> outputs);
  // The step did not complete: ends the requests of the sequences `touched` (all of the step's
  // when null); see Scheduler::AbandonStep.
  void FailStep(const absl::Status& error, bool engine_applied_plan,
                const std::vector<SequenceId>* touched);
  void FailEverything(const absl::Status& error);
  void RunAfterStep(bool ok);
  friend class LoopAccess;

  Executor& executor_;
  Clock clock_;
  Scheduler scheduler_;  // loop thread only
  struct Entry {
    std::shared_ptr<RequestStream> stream;
    int32_t num_running_choices = 0;
  };
  absl::flat_hash_map<RequestId, Entry> streams_;  // loop thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Submission> inbox_;
  std::vector<RequestId> aborts_;
  std::vector<std::pair<RequestId, int32_t>> choice_aborts_;
  std::vector<Command> commands_;
  std::function<void(RequestId)> abort_listener_;
  std::vector<std::function<void(bool)>> after_step_;  // loop thread only
  bool stopping_ = false;
  bool device_lost_ = false;  // loop thread only
  FatalHandler fatal_handler_;
  EngineLoopStats stats_;

  std::thread thread_;
};

}  // namespace loom
