// kernels/cpu/work_claims.h: the claim order (own front first, then the back of the next lists),
// every unit claimed exactly once under concurrent claims, and the hint of Unclaimed; and
// ParallelForStealing: every item once, pieces inside the owner's share, a slow thread's tail
// taken by the others.
#include "kernels/cpu/work_claims.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/thread_pool.h"

namespace loom::cpu {
namespace {

TEST(WorkClaimsTest, OwnFrontThenOthersBacks) {
  const std::vector<int64_t> counts = {2, 3, 0};
  WorkClaims claims(counts);
  std::vector<std::pair<int, int64_t>> order;
  int owner = -1;
  int64_t index = -1;
  // Thread 0 alone: its own list front to back, then list 1 back to front (list 2 is empty).
  while (claims.Claim(0, &owner, &index)) order.emplace_back(owner, index);
  const std::vector<std::pair<int, int64_t>> want = {{0, 0}, {0, 1}, {1, 2}, {1, 1}, {1, 0}};
  EXPECT_EQ(order, want);
  EXPECT_FALSE(claims.Claim(1, &owner, &index));
  EXPECT_FALSE(claims.Claim(2, &owner, &index));
}

TEST(WorkClaimsTest, ThiefTakesTheBackWhileTheOwnerTakesTheFront) {
  const std::vector<int64_t> counts = {4, 1};
  WorkClaims claims(counts);
  int owner = -1;
  int64_t index = -1;
  ASSERT_TRUE(claims.Claim(1, &owner, &index));
  EXPECT_EQ(owner, 1);
  EXPECT_EQ(index, 0);
  ASSERT_TRUE(claims.Claim(0, &owner, &index));
  EXPECT_EQ(index, 0);
  EXPECT_TRUE(claims.Unclaimed(0, 1));
  EXPECT_TRUE(claims.Unclaimed(0, 3));
  // Thread 1's list is empty: it steals list 0's last unit.
  ASSERT_TRUE(claims.Claim(1, &owner, &index));
  EXPECT_EQ(owner, 0);
  EXPECT_EQ(index, 3);
  EXPECT_FALSE(claims.Unclaimed(0, 3));
  EXPECT_FALSE(claims.Unclaimed(0, 0));
  EXPECT_FALSE(claims.Unclaimed(0, 4));
  EXPECT_FALSE(claims.Unclaimed(0, -1));
  ASSERT_TRUE(claims.Claim(0, &owner, &index));
  EXPECT_EQ(index, 1);
  ASSERT_TRUE(claims.Claim(1, &owner, &index));
  EXPECT_EQ(index, 2);
  EXPECT_FALSE(claims.Claim(0, &owner, &index));
  EXPECT_FALSE(claims.Claim(1, &owner, &index));
}

TEST(WorkClaimsTest, EveryUnitOnceUnderConcurrentClaims) {
  for (int round = 0; round < 200; ++round) {
    const int threads = 2 + round % 4;
    std::vector<int64_t> counts;
    for (int t = 0; t < threads; ++t) counts.push_back((round * 7 + t * 13) % 50);
    WorkClaims claims(counts);
    std::vector<std::vector<std::atomic<int>>> seen;
    for (int64_t c : counts) seen.emplace_back(static_cast<size_t>(c));
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        int owner = -1;
        int64_t index = -1;
        while (claims.Claim(t, &owner, &index)) {
          seen[static_cast<size_t>(owner)][static_cast<size_t>(index)].fetch_add(1);
          // The first thread is slow: the others finish its list from the back.
          if (t == 0) std::this_thread::yield();
        }
      });
    }
    for (std::thread& w : workers) w.join();
    for (int t = 0; t < threads; ++t) {
      for (int64_t i = 0; i < counts[static_cast<size_t>(t)]; ++i) {
        ASSERT_EQ(seen[static_cast<size_t>(t)][static_cast<size_t>(i)].load(), 1)
            << "round " << round << " list " << t << " unit " << i;
      }
    }
  }
}


// Records every range fn was called with, and which thread ran it.
struct StealingRun {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges;  // per thread
  std::vector<int> item_count;
};

StealingRun RunStealing(ThreadPool& pool, int64_t num_items, int64_t pieces, int slow_thread) {
  StealingRun run;
  run.ranges.resize(static_cast<size_t>(pool.num_threads()));
  std::vector<std::atomic<int>> seen(static_cast<size_t>(num_items));
  std::mutex mutex;
  std::map<std::thread::id, int> thread_numbers;  // in the order threads first run a range
  ParallelForStealing(pool, num_items, pieces, [&](int64_t begin, int64_t end) {
    EXPECT_LT(begin, end);
    for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
    int me = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      me = thread_numbers.emplace(std::this_thread::get_id(), thread_numbers.size()).first->second;
    }
    if (me == slow_thread) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> lock(mutex);
    run.ranges[static_cast<size_t>(me)].emplace_back(begin, end);
  });
  for (std::atomic<int>& s : seen) run.item_count.push_back(s.load());
  return run;
}

TEST(ParallelForStealingTest, EveryItemOnceForAnySplit) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t items : {0, 1, 2, 7, 16, 100, 1001}) {
      for (int64_t pieces : {0, 1, 2, 8, 64}) {
        const StealingRun run = RunStealing(pool, items, pieces, /*slow_thread=*/-1);
        for (int64_t i = 0; i < items; ++i) {
          ASSERT_EQ(run.item_count[static_cast<size_t>(i)], 1)
              << "threads " << threads << " items " << items << " pieces " << pieces << " item "
              << i;
        }
      }
    }
  }
}

TEST(ParallelForStealingTest, PiecesStayInsideOneThreadsShare) {
  ThreadPool pool(3);
  const int64_t items = 100;
  const StealingRun run = RunStealing(pool, items, 8, -1);
  size_t calls = 0;
  for (const auto& ranges : run.ranges) {
    for (const auto& [begin, end] : ranges) {
      ++calls;
      // ParallelFor's share t is [t * 100 / 3, (t + 1) * 100 / 3): no range crosses a boundary.
      int64_t share = 0;
      while ((share + 1) * items / 3 <= begin) ++share;
      EXPECT_LE(end, (share + 1) * items / 3) << begin << ".." << end;
    }
  }
  EXPECT_EQ(calls, 24u);  // 8 pieces of each of the 3 shares
}

TEST(ParallelForStealingTest, ASlowThreadsTailIsTakenByTheOthers) {
  ThreadPool pool(2);
  // Whichever thread first runs a piece is slowed (5 ms per piece, 80 ms for its own share, so
  // the other has time to start even on a loaded machine): the other, with nothing slowing it,
  // finishes its own 16 pieces and then takes from the back of the slow one's share.
  const StealingRun run = RunStealing(pool, 64, 16, /*slow_thread=*/0);
  const size_t slow = run.ranges[0].size(), fast = run.ranges[1].size();
  EXPECT_EQ(slow + fast, 32u);
  EXPECT_GT(fast, 16u) << "the fast thread took none of the slow thread's pieces";
}

TEST(ParallelForStealingTest, OnePieceIsTheStaticSplit) {
  ThreadPool pool(2);
  const StealingRun run = RunStealing(pool, 10, 1, /*slow_thread=*/0);
  std::vector<std::pair<int64_t, int64_t>> all;
  for (const auto& ranges : run.ranges) all.insert(all.end(), ranges.begin(), ranges.end());
  std::sort(all.begin(), all.end());
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 5}, {5, 10}};
  EXPECT_EQ(all, want);
}

}  // namespace
}  // namespace loom::cpu
