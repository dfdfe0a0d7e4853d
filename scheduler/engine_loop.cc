#include "scheduler/engine_loop.h"

#include <optional>
#include <utility>

#include "engine/common/logging.h"

namespace loom {

EngineLoop::EngineLoop(Executor& executor, const SchedulerConfig& config, Clock clock)
    : executor_(executor),
      clock_(std::move(clock)),
      scheduler_(config, executor.model_info(), executor.capacity()) {
  // Busy (starting) until the thread first finds nothing to do.
  stats_.idle = false;
  stats_.last_progress_ms = clock_();
  thread_ = std::thread([this] { Run(); });
}

EngineLoop::~EngineLoop() { Stop(); }

std::shared_ptr<RequestStream> EngineLoop::Submit(SchedRequest request) {
  auto stream = std::make_shared<RequestStream>(request.id, std::max(request.n, 1));
  SubmitTo(std::move(request), stream);
  return stream;
}

void EngineLoop::SubmitTo(SchedRequest request, std::shared_ptr<RequestStream> stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      stream->Fail(absl::UnavailableError("the server is shutting down"));
      return;
    }
    inbox_.push_back(Submission{std::move(request), std::move(stream)});
  }
  cv_.notify_one();
}

void EngineLoop::Abort(RequestId id) {
  std::function<void(RequestId)> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
    listener = abort_listener_;
  }
  if (listener) listener(id);
  cv_.notify_one();
}

void EngineLoop::Post(Command command) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.push_back(std::move(command));
  }
  cv_.notify_one();
}

void EngineLoop::SetAbortListener(std::function<void(RequestId)> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  abort_listener_ = std::move(listener);
}

std::shared_ptr<RequestStream> LoopAccess::DetachStream(RequestId id) {
  auto it = loop_.streams_.find(id);
  if (it == loop_.streams_.end()) return nullptr;
  std::shared_ptr<RequestStream> stream = std::move(it->second.stream);
  loop_.streams_.erase(it);
  return stream;
}

void LoopAccess::AttachStream(RequestId id, std::shared_ptr<RequestStream> stream,
                              int32_t num_choices) {
  stream->MarkAccepted();
  loop_.streams_[id] = EngineLoop::Entry{std::move(stream), num_choices};
}

void LoopAccess::AfterNextStep(std::function<void(bool ok)> done) {
  loop_.after_step_.push_back(std::move(done));
}

void EngineLoop::RunAfterStep(bool ok) {
  std::vector<std::function<void(bool)>> callbacks;
  callbacks.swap(after_step_);
  for (auto& done : callbacks) done(ok);
}

void EngineLoop::AbortChoice(RequestId id, int32_t index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    choice_aborts_.emplace_back(id, index);
  }
  cv_.notify_one();
}

void EngineLoop::SetFatalHandler(FatalHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  fatal_handler_ = std::move(handler);
}

EngineLoopStats EngineLoop::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void EngineLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::Run() {
  while (DrainInbox()) {
    if (scheduler_.HasTransfers()) RunTransferStep();
    if (scheduler_.HasWork()) {
      RunOneStep();
    } else {
      RunAfterStep(true);  // nothing queued a transfer: nothing to wait for
    }
    if (device_lost_) {
      RunAfterStep(false);
      return;
    }
  }
  RunAfterStep(false);
  // Stopping: everything still here ends as aborted, and the engine lets go of it.
  for (auto& [id, entry] : streams_) scheduler_.Abort(id);
  if (scheduler_.HasWork()) {
    // Every request is aborted, so this plan only names sequences for the engine to drop.
    const StepPlan plan = scheduler_.Schedule(clock_());
    absl::StatusOr<StepResult> result = executor_.Execute(plan);
    if (result.ok()) (void)scheduler_.Update(*result);
    Publish(scheduler_.TakeOutputs());
  }
  for (auto& [id, entry] : streams_) {
    entry.stream->Fail(absl::UnavailableError("the server stopped"));
  }
  streams_.clear();
  std::vector<Submission> never_started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    never_started.swap(inbox_);
  }
  for (Submission& s : never_started) {
    s.stream->Fail(absl::UnavailableError("the server stopped"));
  }
}

bool EngineLoop::DrainInbox() {
  std::vector<Submission> inbox;
  std::vector<RequestId> aborts;
  std::vector<std::pair<RequestId, int32_t>> choice_aborts;
  std::vector<Command> commands;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const auto has_input = [&] {
      return stopping_ || !inbox_.empty() || !aborts_.empty() || !choice_aborts_.empty() ||
             !commands_.empty() || scheduler_.HasWork() || !after_step_.empty();
    };
    if (!has_input()) {
      stats_.idle = true;
      cv_.wait(lock, has_input);
      stats_.last_progress_ms = clock_();
    }
    stats_.idle = false;
    if (stopping_) return false;
    inbox.swap(inbox_);
    aborts.swap(aborts_);
    choice_aborts.swap(choice_aborts_);
    commands.swap(commands_);
  }
  for (Submission& s : inbox) {
    const RequestId id = s.request.id;
    const int32_t n = s.request.n;
    absl::Status status = scheduler_.Add(std::move(s.request));
    if (!status.ok()) {
      s.stream->Fail(status);
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.num_rejected;
      continue;
    }
    s.stream->MarkAccepted();
    streams_.emplace(id, Entry{std::move(s.stream), n});
  }
  for (RequestId id : aborts) scheduler_.Abort(id);
  for (const auto& [id, index] : choice_aborts) scheduler_.AbortChoice(id, index);
  if (!commands.empty()) {
    LoopAccess access(*this, scheduler_, clock_());
    for (Command& command : commands) command(access);
    // A command may change what the stats show (a reservation takes blocks) without a step
    // following: an idle instance's load must not be the one of its last step.
    std::lock_guard<std::mutex> lock(mu_);
    stats_.scheduler = scheduler_.Stats();
  }
  return true;
}

void EngineLoop::RunOneStep() {
  StepPlan plan = scheduler_.Schedule(clock_());
  absl::StatusOr<StepResult> result = executor_.Execute(plan);
  if (!result.ok() && IsFatalDeviceError(result.status())) {
    FailEverything(result.status());
    return;
  }
  bool failed = true;
  if (!result.ok()) {
    const std::optional<std::vector<SequenceId>> touched = StepAppliedTouched(result.status());
    FailStep(result.status(), /*engine_applied_plan=*/touched.has_value(),
             touched.has_value() ? &*touched : nullptr);
  } else if (absl::Status s = scheduler_.Update(*result); !s.ok()) {
    // The engine ran a plan whose result does not fit it: end every request in the step.
    FailStep(s, /*engine_applied_plan=*/true, nullptr);
  } else {
    failed = false;
  }
  {
    // Before the outputs go out, so a client that saw its request end sees its blocks freed.
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.num_steps;
    if (failed) {
      ++stats_.num_failed_steps;
      ++stats_.num_consecutive_failed_steps;
    } else if (!plan.new_sequences.empty() || !plan.continuing.empty()) {
      // Only a step that computed something shows the engine works again.
      stats_.num_consecutive_failed_steps = 0;
    }
    stats_.scheduler = scheduler_.Stats();
    stats_.last_progress_ms = clock_();
  }
  Publish(scheduler_.TakeOutputs());
  RunAfterStep(!failed);
}

void EngineLoop::RunTransferStep() {
  const StepPlan plan = scheduler_.ScheduleTransfers();
  absl::StatusOr<StepResult> result = executor_.Execute(plan);
  if (!result.ok() && IsFatalDeviceError(result.status())) {
    FailEverything(result.status());
    return;
  }
  bool ok = result.ok();
  if (ok) {
    ok = scheduler_.Update(*result).ok();
  } else {
    LOOM_LOG(kError, "a KV transfer step failed: ", result.status().message());
  }
  if (!ok) (void)scheduler_.AbandonStep(/*engine_applied_plan=*/false);
  RunAfterStep(ok);
}

// The step did not complete: the requests of the sequences it touched end with the error, the
// others go on.
void EngineLoop::FailStep(const absl::Status& error, bool engine_applied_plan,
                          const std::vector<SequenceId>* touched) {
  LOOM_LOG(kError, "step failed", engine_applied_plan ? " after the engine applied it" : "",
           ": ", error.message());
  for (RequestId id : scheduler_.AbandonStep(engine_applied_plan, touched)) {
    auto it = streams_.find(id);
    if (it != streams_.end()) {
      it->second.stream->Fail(error);
      streams_.erase(it);
    }
    scheduler_.Abort(id);
  }
}

void EngineLoop::FailEverything(const absl::Status& error) {
  LOOM_LOG(kError, "device lost, failing every request: ", error.message());
  device_lost_ = true;
  for (auto& [id, entry] : streams_) entry.stream->Fail(error);
  streams_.clear();
  std::vector<Submission> inbox;
  FatalHandler handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;  // later submissions are refused
    ++stats_.num_failed_steps;
    stats_.device_lost = true;
    inbox.swap(inbox_);
    handler = fatal_handler_;
  }
  for (Submission& s : inbox) s.stream->Fail(error);
  if (handler) handler(error);
}

void EngineLoop::Publish(std::vector<ChoiceOutput> outputs) {
  for (ChoiceOutput& out : outputs) {
    auto it = streams_.find(out.request_id);
    if (it == streams_.end()) continue;  // failed earlier; its late finish has no reader
    Entry& entry = it->second;
    const bool finished = out.finish != FinishReason::kNone;
    entry.stream->Push(std::move(out));
    if (finished && --entry.num_running_choices == 0) streams_.erase(it);
  }
}

}  // namespace loom
