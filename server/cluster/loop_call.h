// Runs a function on the engine loop's thread (EngineLoop::Post) and waits for its answer, for
// the cluster's gRPC handlers and migration threads, which must not touch the scheduler
// themselves.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "scheduler/engine_loop.h"

namespace loom::cluster {

// A value that one thread sets once and another waits for.
template <typename T>
class Answer {
 public:
  void Set(T value) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (value_.has_value()) return;
      value_.emplace(std::move(value));
    }
    cv_.notify_all();
  }
  std::optional<T> Wait(int64_t timeout_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return value_.has_value(); });
    return value_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<T> value_;
};

// Calls fn(access, reply) on the loop thread; fn must call reply(value) at most once, now or
// later (e.g. from an AfterNextStep callback). Returns nullopt when no answer came within
// `timeout_ms` (or the loop stopped without running it).
template <typename T>
std::optional<T> CallOnLoop(EngineLoop& loop, int64_t timeout_ms,
                            std::function<void(LoopAccess&, std::function<void(T)>)> fn) {
  auto answer = std::make_shared<Answer<T>>();
  loop.Post([fn = std::move(fn), answer](LoopAccess& access) {
    fn(access, [answer](T value) { answer->Set(std::move(value)); });
  });
  return answer->Wait(timeout_ms);
}

}  // namespace loom::cluster
