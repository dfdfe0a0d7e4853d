#include "scheduler/block_pool.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr int32_t kBlockSize = 4;

std::vector<TokenId> Tokens(std::initializer_list<int32_t> ids) {
  std::vector<TokenId> out;
  for (int32_t id : ids) out.push_back(TokenId(id));
  return out;
}

// Allocates blocks for `tokens`, registers the full ones and returns the block table.
std::vector<BlockId> Store(BlockPool& pool, const std::vector<TokenId>& tokens,
                           std::string_view salt = "") {
  const int32_t num = (static_cast<int32_t>(tokens.size()) + kBlockSize - 1) / kBlockSize;
  std::vector<BlockId> blocks;
  EXPECT_TRUE(pool.Allocate(num, &blocks));
  const std::vector<BlockHash> hashes = HashFullBlocks(tokens, kBlockSize, salt);
  for (size_t i = 0; i < hashes.size(); ++i) {
    pool.Register(blocks[i], hashes[i],
                  std::span<const TokenId>(tokens).subspan(i * kBlockSize, kBlockSize),
                  i == 0 ? nullptr : &blocks[i - 1], salt);
  }
  return blocks;
}

std::vector<BlockId> Find(const BlockPool& pool, const std::vector<TokenId>& tokens,
                          std::string_view salt = "") {
  return pool.FindCachedPrefix(tokens, HashFullBlocks(tokens, kBlockSize, salt), salt);
}

TEST(BlockHashTest, ChainsDependOnEveryEarlierToken) {
  const auto a = HashFullBlocks(Tokens({1, 2, 3, 4, 5, 6, 7, 8}), kBlockSize, "");
  const auto b = HashFullBlocks(Tokens({1, 2, 3, 9, 5, 6, 7, 8}), kBlockSize, "");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_FALSE(a[0] == b[0]);
  EXPECT_FALSE(a[1] == b[1]);  // same second block, different first
  EXPECT_FALSE(a[0] == HashFullBlocks(Tokens({1, 2, 3, 4}), kBlockSize, "tenant")[0]);
  EXPECT_EQ(HashFullBlocks(Tokens({1, 2, 3, 4, 5}), kBlockSize, "").size(), 1u);
  // Fixed across processes: a value computed once.
  EXPECT_EQ(RootBlockHash("").value, RootBlockHash("").value);
}

TEST(BlockPoolTest, AllocateReleaseAndCounts) {
  BlockPool pool(8, kBlockSize, true);
  std::vector<BlockId> a;
  ASSERT_TRUE(pool.Allocate(5, &a));
  EXPECT_EQ(pool.num_free(), 3);
  std::vector<BlockId> b;
  EXPECT_FALSE(pool.Allocate(4, &b));
  EXPECT_TRUE(b.empty());
  pool.Release(a);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, FindsTheLongestCachedPrefixAndSharesIt) {
  BlockPool pool(16, kBlockSize, true);
  const auto prompt = Tokens({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  std::vector<BlockId> first = Store(pool, prompt);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(pool.num_cached(), 2);  // the partial third block is not cached

  const auto other = Tokens({1, 2, 3, 4, 5, 6, 7, 8, 42, 43, 44, 45});
  std::vector<BlockId> hit = Find(pool, other);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], first[0]);
  EXPECT_EQ(hit[1], first[1]);
  pool.Acquire(hit);
  EXPECT_EQ(pool.ref_count(first[0]), 2);

  EXPECT_EQ(Find(pool, Tokens({1, 2, 3, 5})).size(), 0u);
  EXPECT_EQ(Find(pool, Tokens({1, 2, 3, 4, 5, 6, 7, 0})).size(), 1u);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, SaltIsolatesCaches) {
  BlockPool pool(8, kBlockSize, true);
  const auto prompt = Tokens({1, 2, 3, 4, 5, 6, 7, 8});
  Store(pool, prompt, "alice");
  EXPECT_EQ(Find(pool, prompt, "alice").size(), 2u);
  EXPECT_EQ(Find(pool, prompt, "bob").size(), 0u);
  EXPECT_EQ(Find(pool, prompt).size(), 0u);
}

TEST(BlockPoolTest, FreedCachedBlocksStayFindableUntilEvictedTailFirst) {
  BlockPool pool(4, kBlockSize, true);
  const auto prompt = Tokens({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  std::vector<BlockId> blocks = Store(pool, prompt);
  // Release last-first: the tail becomes the first eviction candidate.
  pool.Release(std::vector<BlockId>(blocks.rbegin(), blocks.rend()));
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(Find(pool, prompt).size(), 3u);

  std::vector<BlockId> fresh;
  ASSERT_TRUE(pool.Allocate(1, &fresh));  // the never-cached block goes first
  EXPECT_EQ(Find(pool, prompt).size(), 3u);
  ASSERT_TRUE(pool.Allocate(1, &fresh));  // evicts the tail block
  EXPECT_EQ(Find(pool, prompt).size(), 2u);
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, ReacquiringAFreeCachedBlockTakesItOffTheFreeList) {
  BlockPool pool(2, kBlockSize, true);
  const auto prompt = Tokens({1, 2, 3, 4});
  std::vector<BlockId> blocks = Store(pool, prompt);
  pool.Release(blocks);
  std::vector<BlockId> hit = Find(pool, prompt);
  ASSERT_EQ(hit.size(), 1u);
  pool.Acquire(hit);
  EXPECT_EQ(pool.num_free(), 1);
  std::vector<BlockId> rest;
  EXPECT_FALSE(pool.Allocate(2, &rest));
  ASSERT_TRUE(pool.Allocate(1, &rest));
  EXPECT_NE(rest[0], hit[0]);
  EXPECT_EQ(Find(pool, prompt).size(), 1u);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

// A block found under a hash is still verified against its tokens and its parent, so a crafted
// or accidental collision can never return another chain's K/V.
TEST(BlockPoolTest, ACollidingHashIsAMissNotAWrongHit) {
  BlockPool pool(8, kBlockSize, true);
  const auto victim = Tokens({1, 2, 3, 4, 5, 6, 7, 8});
  std::vector<BlockId> blocks;
  ASSERT_TRUE(pool.Allocate(2, &blocks));
  const auto hashes = HashFullBlocks(victim, kBlockSize, "");
  // Register the victim's first block under the hash the attacker's prompt will compute.
  const auto attacker = Tokens({9, 9, 9, 9, 5, 6, 7, 8});
  const auto attacker_hashes = HashFullBlocks(attacker, kBlockSize, "");
  pool.Register(blocks[0], attacker_hashes[0], std::span<const TokenId>(victim).subspan(0, 4),
                nullptr, "");
  EXPECT_EQ(Find(pool, attacker).size(), 0u);
  // A child registered under the right hash but chained to another parent is refused too.
  BlockPool pool2(8, kBlockSize, true);
  std::vector<BlockId> b2;
  ASSERT_TRUE(pool2.Allocate(3, &b2));
  pool2.Register(b2[0], hashes[0], std::span<const TokenId>(victim).subspan(0, 4), nullptr, "");
  pool2.Register(b2[2], BlockHash{12345}, std::span<const TokenId>(attacker).subspan(0, 4),
                 nullptr, "");
  pool2.Register(b2[1], hashes[1], std::span<const TokenId>(victim).subspan(4, 4), &b2[2], "");
  EXPECT_EQ(Find(pool2, victim).size(), 1u);
}

TEST(BlockPoolTest, AReusedParentIdDoesNotRevalidateAnOrphanedChild) {
  BlockPool pool(3, kBlockSize, true);
  const auto a = Tokens({1, 2, 3, 4, 5, 6, 7, 8});
  std::vector<BlockId> blocks = Store(pool, a);
  // Free the parent only; the child stays owned and registered.
  pool.Release(std::vector<BlockId>{blocks[0]});
  std::vector<BlockId> taken;
  ASSERT_TRUE(pool.Allocate(2, &taken));  // the uncached block, then the evicted parent
  EXPECT_EQ(taken[1], blocks[0]);
  // Re-register the same id with the same tokens (a new registration).
  pool.Register(taken[1], HashFullBlocks(a, kBlockSize, "")[0],
                std::span<const TokenId>(a).subspan(0, 4), nullptr, "");
  // The child points at the old registration of its parent: not part of the new chain.
  EXPECT_EQ(Find(pool, a).size(), 1u);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, CachingOffNeverMatches) {
  BlockPool pool(4, kBlockSize, false);
  const auto prompt = Tokens({1, 2, 3, 4});
  std::vector<BlockId> blocks = Store(pool, prompt);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(Find(pool, prompt).size(), 0u);
  pool.Release(blocks);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, RandomOperationsKeepInvariants) {
  std::mt19937 rng(7);
  BlockPool pool(32, kBlockSize, true);
  std::vector<std::vector<BlockId>> owners;
  for (int iter = 0; iter < 3000; ++iter) {
    const int op = static_cast<int>(rng() % 3);
    if (op == 0) {
      std::vector<TokenId> tokens;
      const int len = static_cast<int>(rng() % 13);
      for (int i = 0; i < len; ++i) tokens.push_back(TokenId(static_cast<int32_t>(rng() % 3)));
      std::vector<BlockId> hit = Find(pool, tokens);
      pool.Acquire(hit);
      const int32_t need = (len + kBlockSize - 1) / kBlockSize - static_cast<int32_t>(hit.size());
      if (!pool.Allocate(std::max(need, 0), &hit)) {
        pool.Release(hit);
      } else {
        const auto hashes = HashFullBlocks(tokens, kBlockSize, "");
        for (size_t i = 0; i < hashes.size(); ++i) {
          pool.Register(hit[i], hashes[i],
                        std::span<const TokenId>(tokens).subspan(i * kBlockSize, kBlockSize),
                        i == 0 ? nullptr : &hit[i - 1], "");
        }
        owners.push_back(hit);
      }
    } else if (!owners.empty()) {
      const size_t k = rng() % owners.size();
      pool.Release(std::vector<BlockId>(owners[k].rbegin(), owners[k].rend()));
      owners.erase(owners.begin() + static_cast<ptrdiff_t>(k));
    }
    if (iter % 500 == 0) pool.EvictAllFree();
    const absl::Status s = pool.CheckInvariants();
    ASSERT_TRUE(s.ok()) << "iteration " << iter << ": " << s;
  }
}

}  // namespace
}  // namespace loom
