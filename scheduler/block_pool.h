// Logical KV blocks of one instance: reference counts, the free lists, and the prefix cache.
//
// The scheduler owns every block id in [0, num_blocks); the engine holds the matching physical
// blocks and only ever sees ids in plans. A block is either owned (reference count >= 1: by one
// sequence, or by several that share a cached prefix or an `n > 1` prompt) or free. A full block
// may be *registered* in the prefix cache under the hash of its tokens and everything before
// them; it stays findable while owned and after it is freed, until it is evicted to make room.
//
// Allocation takes never-cached free blocks first, then evicts cached free blocks least recently
// freed first. A sequence releases its blocks last-first, so its tail is evicted before its head
// and the most shared part of a prefix lives longest.
//
// Prefix matches are verified, not trusted to the hash: a cached block is returned only when its
// stored tokens equal the request's, its parent is exactly the block matched one position
// earlier (same id and same registration), and its chain starts from the same cache salt. A hash
// collision, accidental or crafted, costs a cache miss and can never hand one request another's
// K/V.
//
// Not thread-safe: the engine loop thread owns it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/api/ids.h"

namespace loom {

// Hash of a full block's tokens chained to its parent's hash; the first block of a sequence
// chains to RootBlockHash(cache_salt). Deterministic across processes and machines.
struct BlockHash {
  uint64_t value = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

BlockHash RootBlockHash(std::string_view cache_salt);
BlockHash ChainBlockHash(BlockHash parent, std::span<const TokenId> block_tokens);

// Hashes of every full block of `tokens` (tokens.size() / block_size of them).
std::vector<BlockHash> HashFullBlocks(std::span<const TokenId> tokens, int32_t block_size,
                                      std::string_view cache_salt);

class BlockPool {
 public:
  // `num_blocks` ids of `block_size` tokens each; with prefix caching off, Register and
  // FindCachedPrefix do nothing.
  BlockPool(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks no sequence owns (cached or not): what Allocate can hand out.
  int32_t num_free() const { return num_free_; }
  // Registered blocks, owned or not.
  int32_t num_cached() const { return static_cast<int32_t>(by_hash_.size()); }
  int32_t ref_count(BlockId block) const { return blocks_[Index(block)].ref_count; }

  // The longest run of leading full blocks of `tokens` that are cached, verified as described
  // above; `hashes` are HashFullBlocks(tokens, block_size, cache_salt). Takes no reference.
  std::vector<BlockId> FindCachedPrefix(std::span<const TokenId> tokens,
                                        std::span<const BlockHash> hashes,
                                        std::string_view cache_salt) const;

  // One more reference on each block; a free block (necessarily cached: only FindCachedPrefix
  // hands out ids that are not owned) leaves the free lists.
  void Acquire(std::span<const BlockId> blocks);

  // `n` blocks with one reference each, appended to *out; false (and nothing taken) when fewer
  // than n are free. Evicting a cached block unregisters it.
  bool Allocate(int32_t n, std::vector<BlockId>* out);

  // One reference less on each block, in the order given; a block reaching zero becomes free.
  void Release(std::span<const BlockId> blocks);

  // Registers an owned, full block whose tokens are `block_tokens` under `hash`; `parent` is the
  // registered block before it (absent for a sequence's first block). Nothing happens when
  // caching is off, when the block is already registered, or when another block already holds
  // `hash` (the existing one stays; this one is simply not shared).
  void Register(BlockId block, BlockHash hash, std::span<const TokenId> block_tokens,
                const BlockId* parent, std::string_view cache_salt);

  // Unregisters every free cached block (owned blocks stay registered). Returns how many.
  int32_t EvictAllFree();

  // Full consistency check (tests call it after every step): counts, free lists, registry.
  absl::Status CheckInvariants() const;

 private:
  static constexpr int32_t kNone = -1;

  struct Block {
    int32_t ref_count = 0;
    // Registration: serial 0 means not registered.
    uint64_t serial = 0;
    BlockHash hash;
    BlockHash root;  // RootBlockHash of the chain's salt
    int32_t parent = kNone;
    uint64_t parent_serial = 0;
    // Links of the LRU list of free registered blocks.
    int32_t lru_prev = kNone;
    int32_t lru_next = kNone;
  };

  static int32_t Index(BlockId b) { return b.value(); }
  std::span<const TokenId> TokensOf(int32_t index) const {
    return std::span<const TokenId>(tokens_).subspan(static_cast<size_t>(index) * block_size_,
                                                     block_size_);
  }
  void LruPushBack(int32_t index);
  void LruRemove(int32_t index);
  void Unregister(int32_t index);

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  // Tokens of registered blocks, block_size per block (empty when caching is off).
  std::vector<TokenId> tokens_;
  // Free blocks that are not registered (a stack) and free registered ones (LRU, head oldest).
  std::vector<int32_t> free_uncached_;
  int32_t lru_head_ = kNone;
  int32_t lru_tail_ = kNone;
  int32_t num_free_ = 0;
  uint64_t next_serial_ = 1;
  absl::flat_hash_map<uint64_t, int32_t> by_hash_;
};

}  // namespace loom
