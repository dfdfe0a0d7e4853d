// kernels/cpu/thread_pool.h: every item is covered exactly once by the documented split, for many
// sizes and thread counts (no items, fewer items than threads); every thread's task runs even on
// an empty slice; repeated calls; construction and destruction with no work.
#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace loom::cpu {
namespace {

// Runs one ParallelFor over `num_items` and checks the slices: each thread called once with the
// documented range, every item visited exactly once.
void ExpectExactCover(ThreadPool& pool, int64_t num_items) {
  const int n = pool.num_threads();
  std::vector<std::atomic<int>> visits(static_cast<size_t>(num_items));
  std::vector<std::atomic<int>> calls(n);
  std::vector<int64_t> begins(n, -1), ends(n, -1);
  pool.ParallelFor(num_items, [&](int64_t begin, int64_t end, int thread) {
    ASSERT_GE(thread, 0);
    ASSERT_LT(thread, n);
    calls[thread].fetch_add(1);
    begins[thread] = begin;
    ends[thread] = end;
    for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1);
  });
  for (int t = 0; t < n; ++t) {
    ASSERT_EQ(calls[t].load(), 1) << "thread " << t << " of " << n << ", " << num_items << " items";
    EXPECT_EQ(begins[t], num_items * t / n) << "thread " << t;
    EXPECT_EQ(ends[t], num_items * (t + 1) / n) << "thread " << t;
  }
  for (int64_t i = 0; i < num_items; ++i) {
    ASSERT_EQ(visits[i].load(), 1)
        << "item " << i << " of " << num_items << ", " << n << " threads";
  }
}

TEST(ThreadPoolTest, CoversEveryItemExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 7, 16}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.num_threads(), threads);
    for (int64_t items : {0, 1, 2, 3, 5, 7, 15, 16, 17, 100, 1000, 4097}) {
      ExpectExactCover(pool, items);
    }
  }
}

TEST(ThreadPoolTest, MoreThreadsThanItems) {
  ThreadPool pool(8);
  for (int64_t items = 0; items <= 8; ++items) ExpectExactCover(pool, items);
}

TEST(ThreadPoolTest, ZeroItemsStillCallsEveryThread) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.ParallelFor(0, [&](int64_t begin, int64_t end, int) {
    EXPECT_EQ(begin, end);
    calls.fetch_add(1);
  });
  EXPECT_EQ(calls.load(), 4);
}

TEST(ThreadPoolTest, RunOnAllThreadsRunsEachThreadOnce) {
  ThreadPool pool(5);
  std::vector<std::atomic<int>> seen(5);
  pool.RunOnAllThreads([&](int64_t begin, int64_t end, int thread) {
    EXPECT_EQ(begin, thread);
    EXPECT_EQ(end, thread + 1);
    seen[thread].fetch_add(1);
  });
  for (auto& count : seen) EXPECT_EQ(count.load(), 1);
}

// Many back-to-back calls (the engine's pattern): each returns only when all its work is done,
// so the sum after every call is exact.
TEST(ThreadPoolTest, RepeatedCallsEachCompleteBeforeReturning) {
  ThreadPool pool(4);
  std::vector<int64_t> data(257, 0);
  for (int round = 1; round <= 2000; ++round) {
    const int64_t items = round % 257;
    pool.ParallelFor(items, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) data[i] += 1;
    });
    // Items [0, items) got one more visit this round.
    if (round % 500 == 0) {
      int64_t total = 0;
      for (int64_t v : data) total += v;
      int64_t expected = 0;
      for (int r = 1; r <= round; ++r) expected += r % 257;
      ASSERT_EQ(total, expected) << "round " << round;
    }
  }
}

// Workers slower than the caller: ParallelFor still waits for every one of them.
TEST(ThreadPoolTest, ReturnsOnlyWhenEveryThreadIsDone) {
  ThreadPool pool(4);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> finished{0};
    pool.ParallelFor(4, [&](int64_t, int64_t, int thread) {
      if (thread != 0) std::this_thread::sleep_for(std::chrono::microseconds(500 * thread));
      finished.fetch_add(1);
    });
    ASSERT_EQ(finished.load(), 4) << "round " << round;
  }
}

// Calls separated by pauses longer than the workers' spin phase: they must wake from sleep.
TEST(ThreadPoolTest, WakesAfterIdle) {
  ThreadPool pool(3);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ExpectExactCover(pool, 10);
  }
}

TEST(ThreadPoolTest, DefaultSizeIsTheAvailableCpus) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.num_threads(), NumAvailableCpus());
  EXPECT_GE(NumAvailableCpus(), 1);
  ThreadPool negative(-3);
  EXPECT_EQ(negative.num_threads(), NumAvailableCpus());
}

TEST(ThreadPoolTest, DestructionWhileIdle) {
  for (int threads : {1, 2, 8, 32}) {
    // Never used.
    { ThreadPool pool(threads); }
    // Used, then destroyed at once (workers still spinning) or after they went to sleep.
    for (int pause_ms : {0, 5}) {
      auto pool = std::make_unique<ThreadPool>(threads);
      ExpectExactCover(*pool, 33);
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      pool.reset();
    }
  }
}

TEST(ThreadPoolTest, LargeItemCountsDoNotOverflowTheSplit) {
  ThreadPool pool(3);
  const int64_t items = int64_t{1} << 40;
  std::vector<int64_t> begins(3), ends(3);
  pool.ParallelFor(items, [&](int64_t begin, int64_t end, int thread) {
    begins[thread] = begin;
    ends[thread] = end;
  });
  EXPECT_EQ(begins[0], 0);
  EXPECT_EQ(ends[0], begins[1]);
  EXPECT_EQ(ends[1], begins[2]);
  EXPECT_EQ(ends[2], items);
}

}  // namespace
}  // namespace loom::cpu
