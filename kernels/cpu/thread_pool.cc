#include "kernels/cpu/thread_pool.h"

#include <sched.h>

#include <chrono>

namespace loom::cpu {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// How long an idle worker spins before it sleeps on the generation counter. Steps issue many
// short parallel regions back to back, so spinning through the gaps between them matters.
constexpr auto kSpinDuration = std::chrono::microseconds(200);

}  // namespace

int NumAvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : NumAvailableCpus()) {
  workers_.reserve(num_threads_ - 1);
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::ParallelFor(int64_t num_items, Task task) {
  if (num_threads_ == 1) {
    task(0, num_items, 0);
    return;
  }
  task_ = &task;
  num_items_ = num_items;
  num_done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  task(0, num_items / num_threads_, 0);
  const int num_workers = num_threads_ - 1;
  // Spin while the workers finish; yield the core now and then in case a worker waits for it
  // (more runnable threads than cores).
  for (int spins = 1; num_done_.load(std::memory_order_acquire) != num_workers; ++spins) {
    if (spins % 1024 == 0) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
  }
  task_ = nullptr;
}

void ThreadPool::WorkerLoop(int thread_index) {
  uint32_t seen = 0;
  while (true) {
    // Wait for a new generation: spin first, then sleep.
    const auto spin_until = std::chrono::steady_clock::now() + kSpinDuration;
    uint32_t current = generation_.load(std::memory_order_acquire);
    int spins = 0;
    while (current == seen) {
      if (++spins % 64 == 0 && std::chrono::steady_clock::now() > spin_until) {
        generation_.wait(seen, std::memory_order_acquire);
      } else if (spins % 1024 == 0) {
        std::this_thread::yield();
      } else {
        CpuRelax();
      }
      current = generation_.load(std::memory_order_acquire);
    }
    seen = current;
    if (stopping_.load(std::memory_order_acquire)) return;
    const int64_t begin = num_items_ * thread_index / num_threads_;
    const int64_t end = num_items_ * (thread_index + 1) / num_threads_;
    (*task_)(begin, end, thread_index);
    num_done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

}  // namespace loom::cpu
