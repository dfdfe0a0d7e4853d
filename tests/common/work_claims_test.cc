// kernels/cpu/work_claims.h: the claim order (own front first, then the back of the next lists),
// every unit claimed exactly once under concurrent claims, and the hint of Unclaimed.
#include "kernels/cpu/work_claims.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace loom::cpu
