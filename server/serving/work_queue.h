// A fixed pool of threads running posted tasks in FIFO order: where response work (polling a
// generation, detokenizing, writing JSON) runs, off both the engine loop and the I/O threads.
//
// Thread safety: Post from any thread. The destructor runs the tasks already posted, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

class WorkQueue {
 public:
  explicit WorkQueue(int num_threads);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Post(std::function<void()> task);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace loom
