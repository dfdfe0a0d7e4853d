// Work claims with stealing at the end: every thread owns a list of units (a static split, in the
// order it would run them) and takes them from the front; a thread whose list is empty takes the
// last unit left of another thread's list. Units run where the static split puts them until one
// thread finishes early, so what each thread prefetches for its next unit is still right, and a
// thread slowed by a busy core or a late start gives its tail to the one that is free.
//
// Each list's state is one 64-bit word, front index in the high half and back index in the low
// half, changed by compare-and-swap: a unit is claimed exactly once, by its owner or by a thief.
// Claim and Unclaimed may be called from any number of threads at once; the lists are fixed at
// construction.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace loom::cpu {

class WorkClaims {
 public:
  // counts[t]: units in thread t's list (at most 2^31 - 1 each).
  explicit WorkClaims(std::span<const int64_t> counts) : lists_(counts.size()) {
    for (size_t t = 0; t < counts.size(); ++t) {
      lists_[t].word.store(static_cast<uint64_t>(counts[t]), std::memory_order_relaxed);
    }
  }
  WorkClaims(const WorkClaims&) = delete;
  WorkClaims& operator=(const WorkClaims&) = delete;

  // The next unit for `thread`: the front of its own list, else the back of the next non-empty
  // list after it; false when every list is empty. Sets *owner and *index (the unit's list and
  // its position there).
  bool Claim(int thread, int* owner, int64_t* index) {
    const int n = static_cast<int>(lists_.size());
    for (int i = 0; i < n; ++i) {
      const int t = (thread + i) % n;
      std::atomic<uint64_t>& word = lists_[static_cast<size_t>(t)].word;
      uint64_t v = word.load(std::memory_order_relaxed);
      while (true) {
        const uint64_t front = v >> 32, back = v & 0xffffffffu;
        if (front >= back) break;
        const bool own = i == 0;
        if (word.compare_exchange_weak(v, own ? v + (uint64_t{1} << 32) : v - 1,
                                       std::memory_order_relaxed)) {
          *owner = t;
          *index = static_cast<int64_t>(own ? front : back - 1);
          return true;
        }
      }
    }
    return false;
  }

  // Whether unit `index` of `owner`'s list is still unclaimed (a hint: it may be claimed at any
  // moment after).
  bool Unclaimed(int owner, int64_t index) const {
    const uint64_t v = lists_[static_cast<size_t>(owner)].word.load(std::memory_order_relaxed);
    const auto i = static_cast<uint64_t>(index);
    return index >= 0 && i >= (v >> 32) && i < (v & 0xffffffffu);
  }

 private:
  struct alignas(64) List {
    std::atomic<uint64_t> word{0};
  };
  std::vector<List> lists_;
};

// Runs fn(begin, end) over [0, num_items) on every thread of `pool`: each thread's even share
// (ParallelFor's) is cut into `pieces` contiguous ranges that it takes front to back, and a thread
// that runs out takes the last ranges left in another's share. With pieces <= 1, or one thread,
// this is ParallelFor's static split. fn is not called for empty ranges.
template <typename Fn>
void ParallelForStealing(ThreadPool& pool, int64_t num_items, int64_t pieces, const Fn& fn) {
  const int n = pool.num_threads();
  if (n == 1 || pieces <= 1) {
    pool.ParallelFor(num_items, [&](int64_t begin, int64_t end, int) {
      if (begin < end) fn(begin, end);
    });
    return;
  }
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) {
    const int64_t share = (t + 1) * num_items / n - t * num_items / n;
    counts[static_cast<size_t>(t)] = share < pieces ? share : pieces;
  }
  WorkClaims claims(counts);
  pool.RunOnAllThreads([&](int64_t, int64_t, int thread) {
    int owner = 0;
    int64_t index = 0;
    while (claims.Claim(thread, &owner, &index)) {
      const int64_t share_begin = owner * num_items / n;
      const int64_t share = (owner + 1) * num_items / n - share_begin;
      const int64_t count = counts[static_cast<size_t>(owner)];
      fn(share_begin + index * share / count, share_begin + (index + 1) * share / count);
    }
  });
}

}  // namespace loom::cpu
