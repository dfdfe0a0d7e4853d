#include "scheduler/block_pool.h"

#include <algorithm>

#include "engine/common/logging.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

// A 64-bit mixing step (the SplitMix64 finaliser): full avalanche, fixed constants, so hashes
// agree across processes and machines.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

uint64_t Absorb(uint64_t h, uint64_t word) { return Mix(h ^ (word + 0x9E3779B97F4A7C15ull)); }

}  // namespace

BlockHash RootBlockHash(std::string_view cache_salt) {
  uint64_t h = Mix(0x6C6F6F6D2D6B7663ull ^ cache_salt.size());
  for (unsigned char c : cache_salt) h = Absorb(h, c);
  return BlockHash{h};
}

BlockHash ChainBlockHash(BlockHash parent, std::span<const TokenId> block_tokens) {
  uint64_t h = Absorb(parent.value, block_tokens.size());
  for (TokenId t : block_tokens) h = Absorb(h, static_cast<uint32_t>(t.value()));
  return BlockHash{h};
}

std::vector<BlockHash> HashFullBlocks(std::span<const TokenId> tokens, int32_t block_size,
                                      std::string_view cache_salt) {
  std::vector<BlockHash> hashes;
  BlockHash h = RootBlockHash(cache_salt);
  for (size_t start = 0; start + block_size <= tokens.size(); start += block_size) {
    h = ChainBlockHash(h, tokens.subspan(start, block_size));
    hashes.push_back(h);
  }
  return hashes;
}

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching), blocks_(num_blocks) {
  LOOM_CHECK(num_blocks >= 0 && block_size >= 1);
  if (prefix_caching_) tokens_.resize(static_cast<size_t>(num_blocks) * block_size);
  // Lowest ids first out of the stack.
  for (int32_t i = num_blocks - 1; i >= 0; --i) free_uncached_.push_back(i);
  num_free_ = num_blocks;
}

std::vector<BlockId> BlockPool::FindCachedPrefix(std::span<const TokenId> tokens,
                                                 std::span<const BlockHash> hashes,
                                                 std::string_view cache_salt) const {
  std::vector<BlockId> found;
  if (!prefix_caching_ || hashes.empty()) return found;
  const BlockHash root = RootBlockHash(cache_salt);
  int32_t parent = kNone;
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto it = by_hash_.find(hashes[i].value);
    if (it == by_hash_.end()) break;
    const int32_t index = it->second;
    const Block& b = blocks_[index];
    const bool same_parent = parent == kNone
                                 ? b.parent == kNone
                                 : b.parent == parent && b.parent_serial == blocks_[parent].serial;
    if (!same_parent || !(b.root == root) ||
        !std::equal(TokensOf(index).begin(), TokensOf(index).end(),
                    tokens.begin() + static_cast<ptrdiff_t>(i) * block_size_)) {
      break;
    }
    found.push_back(BlockId(index));
    parent = index;
  }
  return found;
}

void BlockPool::Acquire(std::span<const BlockId> blocks) {
  for (BlockId id : blocks) {
    const int32_t index = Index(id);
    Block& b = blocks_[index];
    if (b.ref_count == 0) {
      LOOM_CHECK(b.serial != 0, "acquiring free block ", index, " that is not cached");
      LruRemove(index);
      --num_free_;
    }
    ++b.ref_count;
  }
}

bool BlockPool::Allocate(int32_t n, std::vector<BlockId>* out) {
  if (n < 0 || n > num_free_) return false;
  for (int32_t k = 0; k < n; ++k) {
    int32_t index;
    if (!free_uncached_.empty()) {
      index = free_uncached_.back();
      free_uncached_.pop_back();
    } else {
      index = lru_head_;
      LruRemove(index);
      Unregister(index);
    }
    blocks_[index].ref_count = 1;
    --num_free_;
    out->push_back(BlockId(index));
  }
  return true;
}

void BlockPool::Release(std::span<const BlockId> blocks) {
  for (BlockId id : blocks) {
    const int32_t index = Index(id);
    Block& b = blocks_[index];
    LOOM_CHECK(b.ref_count > 0, "releasing free block ", index);
    if (--b.ref_count > 0) continue;
    ++num_free_;
    if (b.serial != 0) {
      LruPushBack(index);
    } else {
      free_uncached_.push_back(index);
    }
  }
}

void BlockPool::Register(BlockId block, BlockHash hash, std::span<const TokenId> block_tokens,
                         const BlockId* parent, std::string_view cache_salt) {
  if (!prefix_caching_) return;
  const int32_t index = Index(block);
  Block& b = blocks_[index];
  LOOM_CHECK(b.ref_count > 0, "registering free block ", index);
  LOOM_CHECK(static_cast<int32_t>(block_tokens.size()) == block_size_);
  if (b.serial != 0 || by_hash_.contains(hash.value)) return;
  if (parent != nullptr && blocks_[Index(*parent)].serial == 0) return;  // chain broken
  b.serial = next_serial_++;
  b.hash = hash;
  b.root = RootBlockHash(cache_salt);
  b.parent = parent == nullptr ? kNone : Index(*parent);
  b.parent_serial = parent == nullptr ? 0 : blocks_[b.parent].serial;
  std::copy(block_tokens.begin(), block_tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(index) * block_size_);
  by_hash_.emplace(hash.value, index);
}

int32_t BlockPool::EvictAllFree() {
  int32_t evicted = 0;
  while (lru_head_ != kNone) {
    const int32_t index = lru_head_;
    LruRemove(index);
    Unregister(index);
    free_uncached_.push_back(index);
    ++evicted;
  }
  return evicted;
}

void BlockPool::Unregister(int32_t index) {
  Block& b = blocks_[index];
  by_hash_.erase(b.hash.value);
  b.serial = 0;
  b.parent = kNone;
  b.parent_serial = 0;
}

void BlockPool::LruPushBack(int32_t index) {
  Block& b = blocks_[index];
  b.lru_prev = lru_tail_;
  b.lru_next = kNone;
  if (lru_tail_ != kNone) {
    blocks_[lru_tail_].lru_next = index;
  } else {
    lru_head_ = index;
  }
  lru_tail_ = index;
}

void BlockPool::LruRemove(int32_t index) {
  Block& b = blocks_[index];
  if (b.lru_prev != kNone) {
    blocks_[b.lru_prev].lru_next = b.lru_next;
  } else {
    lru_head_ = b.lru_next;
  }
  if (b.lru_next != kNone) {
    blocks_[b.lru_next].lru_prev = b.lru_prev;
  } else {
    lru_tail_ = b.lru_prev;
  }
  b.lru_prev = b.lru_next = kNone;
}

absl::Status BlockPool::CheckInvariants() const {
  const int32_t n = num_blocks();
  std::vector<int> seen_free(n, 0);
  for (int32_t index : free_uncached_) {
    if (index < 0 || index >= n || blocks_[index].ref_count != 0 || blocks_[index].serial != 0) {
      return absl::InternalError(StrCat("block ", index, " is on the uncached free list wrongly"));
    }
    ++seen_free[index];
  }
  int32_t lru_count = 0;
  for (int32_t index = lru_head_, prev = kNone; index != kNone;
       prev = index, index = blocks_[index].lru_next) {
    if (blocks_[index].lru_prev != prev || blocks_[index].ref_count != 0 ||
        blocks_[index].serial == 0 || ++lru_count > n) {
      return absl::InternalError(StrCat("block ", index, " breaks the cached free list"));
    }
    ++seen_free[index];
  }
  int32_t num_free = 0;
  int32_t num_registered = 0;
  for (int32_t index = 0; index < n; ++index) {
    const Block& b = blocks_[index];
    if (b.ref_count < 0) return absl::InternalError(StrCat("block ", index, " has a negative count"));
    const int expected = b.ref_count == 0 ? 1 : 0;
    if (seen_free[index] != expected) {
      return absl::InternalError(StrCat("block ", index, " with ", b.ref_count,
                                        " references is on the free lists ", seen_free[index],
                                        " times"));
    }
    num_free += expected;
    if (b.serial != 0) {
      ++num_registered;
      auto it = by_hash_.find(b.hash.value);
      if (it == by_hash_.end() || it->second != index) {
        return absl::InternalError(StrCat("registered block ", index, " is not in the hash map"));
      }
    }
  }
  if (num_free != num_free_ || num_registered != static_cast<int32_t>(by_hash_.size())) {
    return absl::InternalError(StrCat("counts disagree: free ", num_free, " vs ", num_free_,
                                      ", registered ", num_registered, " vs ", by_hash_.size()));
  }
  return absl::OkStatus();
}

}  // namespace loom
