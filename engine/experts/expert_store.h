// The expert store: where each routed expert of an MoE model lives, and a bounded fast tier that
// holds the hot ones (shared/ARCHITECTURE.md §4 "Expert store"; the policy that decides what to
// prefetch and evict is the scheduler's, scheduler/experts/).
//
// Tiers. Every expert has a home in the slow tier; the fast tier is `budget_bytes` of memory cut
// into equal slots, one expert per slot. A slot holds an expert's parts (gate, up, down matrices,
// or whatever the caller names) back to back, each in its own page-aligned chunk at the offset
// modulo 4096 it has in its home, so a part has in the slot the alignment it has at home and
// kernels use it in place. Which memories the tiers are is an ExpertTiers:
//   - Create (the CPU backend): the home is the checkpoint file and the slots are RAM. Reads
//     bypass the OS page cache where the file system allows it (O_DIRECT, into the aligned
//     slot), and otherwise read normally and then drop the range from the page cache
//     (POSIX_FADV_DONTNEED): the budget is the memory experts really take, so a model larger
//     than RAM runs from its file instead of thrashing the page cache, and the figures measure
//     the store.
//   - CreateWithTiers: any other pair, e.g. host memory and device memory
//     (engine/experts/device_tiers.h).
//
// Residency is reference counted: Acquire pins an expert until the matching Release, and a
// pinned expert is never evicted. One loader thread loads; on-demand loads (Acquire of a missing
// expert) always go before prefetches, and Prefetch replaces the queue of prefetches not yet
// started (stale hints are cancelled). The victim of a load is the unpinned resident expert with
// the lowest score (SetScores: the scheduler's predicted future use), least recently used first
// among equals; an expert never scored has score 0. With no scores every policy reduces to LRU.
// Release means the caller is done with the bytes: on a backend whose ops run asynchronously the
// caller releases only once the ops that read them have finished.
//
// No Acquire may be in flight when the store is destroyed.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/api/expert_hints.h"

namespace loom {

// One contiguous byte range of an expert in one of its homes (a checkpoint file, a host buffer).
struct ExpertPart {
  int32_t file = 0;  // index into the homes given to Create (the paths) or CreateWithTiers
  int64_t offset = 0;
  int64_t bytes = 0;
};

// Where one expert lives at home: its parts, in the order they are laid out in a slot.
struct ExpertLocation {
  ExpertKey key;
  std::vector<ExpertPart> parts;
};

struct ExpertStoreOptions {
  // RAM for the fast tier; it holds budget_bytes / slot_bytes experts (at least one).
  int64_t budget_bytes = 0;
  // Try O_DIRECT first (the fallback is a normal read followed by POSIX_FADV_DONTNEED).
  bool direct_io = true;
};

// Counters since creation. A prefetch is "used" when an Acquire finds the expert it loaded (or
// is loading) before it is evicted, "wasted" when it is evicted unused.
struct ExpertStoreStats {
  int64_t hits = 0;              // Acquire found it resident (or arriving from a prefetch)
  int64_t misses = 0;            // Acquire had to load it on demand
  int64_t prefetches_issued = 0; // prefetch loads started
  int64_t prefetches_used = 0;
  int64_t prefetches_wasted = 0;
  int64_t prefetches_cancelled = 0;  // hints replaced before their load started
  int64_t prefetches_dropped = 0;    // no free slot and nothing scored lower to evict
  int64_t evictions = 0;
  int64_t bytes_loaded = 0;
  double load_seconds = 0;       // time the loader spent reading
  double wait_seconds = 0;       // time Acquire calls waited for loads (summed over callers)
  int64_t computed_at_home = 0;  // experts a step computed in the slow tier instead of loading
  int32_t num_slots = 0;
  int32_t resident = 0;
  bool direct_io = false;        // whether reads bypass the page cache with O_DIRECT
};

// The store's two memories: the one its slots are cut from, and the homes experts are loaded from.
class ExpertTiers {
 public:
  virtual ~ExpertTiers() = default;
  // num_slots * slot_bytes bytes (as asked of the factory), in the fast tier's memory.
  virtual uint8_t* slots() const = 0;
  // Brings `location`'s parts from home into `slot`, part i at slot + part_offsets[i], and returns
  // once they are there. Called by the store's loader thread only. DataLoss names the expert.
  virtual absl::Status Load(const ExpertLocation& location, std::span<const int64_t> part_offsets,
                            uint8_t* slot) = 0;
  // Whether loads bypass the OS page cache (a file home read with O_DIRECT).
  virtual bool direct_io() const { return false; }
};

// Makes the tiers once the store knows its slot size and count.
using ExpertTiersFactory = std::function<absl::StatusOr<std::unique_ptr<ExpertTiers>>(
    int64_t slot_bytes, int32_t num_slots)>;

// A resident, pinned expert: the slot's bytes and where each part starts in them.
struct ExpertBytes {
  const uint8_t* data = nullptr;
  std::vector<int64_t> part_offsets;  // one per ExpertLocation part
};

class ExpertStore {
 public:
  // Opens `paths` (the checkpoint's files; a part names one by index) read-only and checks every
  // location lies inside its file (DataLoss naming the expert otherwise). A key may appear once.
  // The fast tier (RAM) is allocated here.
  static absl::StatusOr<std::unique_ptr<ExpertStore>> Create(const std::vector<std::string>& paths,
                                                             std::vector<ExpertLocation> experts,
                                                             const ExpertStoreOptions& options);
  // The same over other tiers: homes named `home_names` (for errors) of `home_bytes` bytes each
  // (a part names one by index); `make_tiers` is called once with the slot size and count
  // (options.direct_io is the tiers' business).
  static absl::StatusOr<std::unique_ptr<ExpertStore>> CreateWithTiers(
      const std::vector<std::string>& home_names, const std::vector<int64_t>& home_bytes,
      std::vector<ExpertLocation> experts, const ExpertStoreOptions& options,
      const ExpertTiersFactory& make_tiers);
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  // Pins `key`, loading it first if needed (ahead of any prefetch), and returns its bytes, valid
  // until the matching Release. NotFound for an unknown key; ResourceExhausted when every slot is
  // pinned; DataLoss when the read fails.
  absl::StatusOr<ExpertBytes> Acquire(ExpertKey key);
  void Release(ExpertKey key);

  // Starts loading `key` at on-demand priority without pinning it, ahead of an Acquire the caller
  // is about to make (e.g. the next expert of a layer while the current one computes). That
  // Acquire counts a miss (the cache did not hold the expert when the step needed it) but waits
  // less; with `miss_counted` the caller has counted it already (CountUse), and the Acquire
  // counts as usual. Resident, loading or unknown keys are left alone.
  void Preload(ExpertKey key, bool miss_counted = false);

  // For steps that read a missing expert where it lives instead of waiting for it (grouped
  // experts behind a cache): pins `key` when it is resident now and returns its bytes (valid
  // until the matching Release); nullopt, loading nothing and counting nothing, otherwise.
  std::optional<ExpertBytes> PinIfResident(ExpertKey key);
  // Counts one use of `key` by such a step: a hit when it was read from its slot (a prefetch that
  // brought it is then used), else one expert computed at home.
  void CountUse(ExpertKey key, bool from_slot);

  // Replaces the queue of prefetches not yet started with `keys` (most urgent first); keys
  // already resident or loading, and unknown keys, are skipped. A prefetch takes a free slot or
  // evicts an unpinned expert scored strictly lower than itself; with no such slot it is dropped
  // (a later Acquire loads the expert on demand).
  void Prefetch(std::span<const ExpertKey> keys);

  // Predicted future use per expert (higher = keep); replaces the previous scores.
  void SetScores(std::span<const std::pair<ExpertKey, double>> scores);

  bool IsResident(ExpertKey key) const;
  // Resident, or being loaded (or queued) for an Acquire or Preload.
  bool IsResidentOrComing(ExpertKey key) const;
  // Counts one expert that a step computed in the slow tier (ExpertStoreStats::computed_at_home).
  void CountComputedAtHome();
  ExpertStoreStats Stats() const;
  int64_t slot_bytes() const { return slot_bytes_; }

 private:
  enum class State { kHome, kQueued, kLoading, kResident };
  struct Entry {
    ExpertLocation location;
    std::vector<int64_t> part_offsets;
    State state = State::kHome;
    int32_t slot = -1;
    int32_t pins = 0;
    int32_t waiters = 0;  // Acquire calls waiting for it: not evictable, as if pinned
    uint64_t last_use = 0;
    double score = 0;
    bool from_prefetch = false;  // resident or loading because of a prefetch, not yet used
    bool demanded = false;       // an Acquire waits for it, or a Preload asked for it
    bool preloaded = false;      // a Preload asked for it; the next Acquire counts the miss
    absl::Status error;          // the last load's failure, reported to its waiters
  };

  ExpertStore(std::unique_ptr<ExpertTiers> tiers, int64_t slot_bytes, int32_t num_slots);
  void LoaderLoop();
  // Under mu_: a free slot, or one freed by evicting the lowest-scored unpinned expert whose
  // score is below `victim_score_below`; -1 when there is none.
  int32_t TakeSlot(double victim_score_below);

  const std::unique_ptr<ExpertTiers> tiers_;
  const int64_t slot_bytes_;
  uint8_t* const slots_;
  std::vector<ExpertKey> slot_owner_;
  std::vector<bool> slot_used_;

  mutable std::mutex mu_;
  std::condition_variable cv_;         // loader: work arrived or stopping
  std::condition_variable loaded_cv_;  // waiters: a load finished
  absl::flat_hash_map<ExpertKey, Entry> entries_;
  std::deque<ExpertKey> demand_;
  std::deque<ExpertKey> prefetch_;
  uint64_t clock_ = 0;
  bool stopping_ = false;
  ExpertStoreStats stats_;
  std::thread loader_;
};

}  // namespace loom
