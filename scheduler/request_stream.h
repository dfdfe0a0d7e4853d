// The channel from the engine loop to whoever serves one request (an HTTP or gRPC handler, the
// CLI): outputs accumulate here and the consumer takes them when it is ready.
//
// The engine loop only appends under a short lock and then calls the notifier, so a slow or
// vanished client never holds up a step. The consumer either waits (Wait) or, from an
// asynchronous server, registers a notifier that schedules a Drain on its own executor.
//
// Thread safety: Push/Fail from the engine loop, Drain/Wait/SetNotifier from any one consumer
// thread at a time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "scheduler/request.h"

namespace loom {

// What a consumer takes from a stream in one Drain.
struct StreamBatch {
  // New tokens and finishes per choice since the last Drain, merged per choice, in order of
  // first appearance.
  std::vector<ChoiceOutput> outputs;
  // The engine loop has admitted the request (it passed the scheduler's checks and admission
  // bounds); a front end may now commit to a success status. Stays true once set.
  bool accepted = false;
  // Every choice has finished (or the request failed): nothing more will come.
  bool done = false;
  // Set when the request failed as a whole (refused at admission, or the engine failed a step
  // it was part of). Outputs taken before stay valid.
  absl::Status error;
};

class RequestStream {
 public:
  explicit RequestStream(RequestId id, int32_t num_choices) : id_(id), num_choices_(num_choices) {}

  RequestId id() const { return id_; }
  int32_t num_choices() const { return num_choices_; }

  // Called from the engine loop (never blocks on the consumer).
  void Push(ChoiceOutput output);
  void Fail(absl::Status error);
  void MarkAccepted();

  // Consumer side. Drain returns what has accumulated (possibly nothing). Wait blocks until
  // something is there, the stream is done, or `timeout` passes.
  StreamBatch Drain();
  StreamBatch Wait(absl::Duration timeout);
  // Called after every Push/Fail, outside the stream's lock, on the engine loop thread; must be
  // cheap and must not block (post work elsewhere). Replaces any earlier notifier.
  void SetNotifier(std::function<void()> notify);

 private:
  StreamBatch TakeLocked();
  void Notify();

  const RequestId id_;
  const int32_t num_choices_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ChoiceOutput> pending_;
  int32_t num_finished_ = 0;
  bool failed_ = false;
  bool accepted_ = false;
  bool accepted_reported_ = false;
  bool done_reported_ = false;
  absl::Status error_;
  std::function<void()> notify_;
};

}  // namespace loom
