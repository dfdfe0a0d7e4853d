// A fixed pool of worker threads for the CPU kernels: the CPU's counterpart of a CUDA stream.
//
// CPU kernels take a `ThreadPool&` the way CUDA kernels take a stream. `ParallelFor` splits a
// range of work items into one contiguous slice per thread; the calling thread runs slice 0 and
// waits for the others, so a call returns only when all the work is done. Workers spin briefly
// before sleeping, which keeps the per-call overhead to a few microseconds during a step.
//
// Thread safety: one thread at a time may call `ParallelFor` (the engine loop). Calls must not
// nest.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace loom::cpu {

class ThreadPool {
 public:
  // A non-owning reference to a callable `void(int64_t begin, int64_t end, int thread_index)`.
  class Task {
   public:
    template <typename Fn>
    Task(const Fn& fn)  // NOLINT: implicit on purpose, like std::function_ref.
        : object_(&fn), call_([](const void* object, int64_t begin, int64_t end, int thread) {
            (*static_cast<const Fn*>(object))(begin, end, thread);
          }) {}
    void operator()(int64_t begin, int64_t end, int thread) const {
      call_(object_, begin, end, thread);
    }

   private:
    const void* object_;
    void (*call_)(const void*, int64_t, int64_t, int);
  };

  // Starts `num_threads - 1` workers (the caller is thread 0). `num_threads <= 0` means one per
  // CPU this process may run on.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs task(begin, end, thread_index) on every thread over an even split of [0, num_items):
  // thread t gets [t * num_items / n, (t + 1) * num_items / n). Slices may be empty; the task is
  // still called so per-thread set-up (e.g. AMX tile configuration) can rely on it.
  void ParallelFor(int64_t num_items, Task task);

  // Runs task(thread_index, thread_index + 1, thread_index) once on every thread.
  void RunOnAllThreads(Task task) { ParallelFor(num_threads_, task); }

 private:
  void WorkerLoop(int thread_index);

  int num_threads_;
  std::vector<std::thread> workers_;
  // Each published job bumps `generation_`; workers run it and bump `num_done_`.
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> num_done_{0};
  std::atomic<bool> stopping_{false};
  const Task* task_ = nullptr;
  int64_t num_items_ = 0;
};

// Number of CPUs this process may run on (sched_getaffinity), at least 1.
int NumAvailableCpus();

}  // namespace loom::cpu
