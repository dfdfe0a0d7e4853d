// Expert-cache policy: which experts the fast tier (device memory on CUDA, the RAM budget on the
// CPU) holds, which one to evict for a missing expert, and what to prefetch.
//
// The policy keeps a plain-data mirror of the engine's expert cache: `capacity_slots` slots,
// each holding one expert of one layer, each with a pin count (the engine is running it). It
// decides; the engine's expert store (engine/experts/) moves bytes. Three implementations,
// chosen by name (Create):
//   "activation"  MoE-Infinity: evicts the resident expert with the lowest predicted future use
//                 (ExpertForecast::Priority from the latest SetForecast), ties by the larger
//                 layer distance (needed latest), then least recently used; prefetches the
//                 likeliest experts of the next layers (PlanPrefetch).
//   "lru"         evicts the least recently used resident expert; never prefetches.
//   "lfu"         evicts the resident expert with the fewest accesses since the policy started
//                 (counts survive eviction), ties least recently used; never prefetches.
// Every order ends on the key (layer, then expert), so decisions are deterministic.
//
// Invariants: a pinned expert is never evicted (by Access or PlanPrefetch); at most
// `capacity_slots` experts are resident. Nothing is refused silently: an access that needs a
// slot when every slot is pinned answers ResourceExhausted and changes nothing, and a prefetch
// plan counts the candidates it could not place (PrefetchPlan::num_dropped).
//
// Not thread-safe; the engine loop thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/api/expert_hints.h"
#include "scheduler/experts/expert_predictor.h"

namespace loom {

struct ExpertCacheConfig {
  // Shape of the model's MoE layers (> 0).
  int32_t num_layers = 0;
  int32_t num_experts = 0;
  // Experts the fast tier holds, 1 .. num_layers * num_experts.
  int32_t capacity_slots = 0;
  // Activation policy: prefetch at all, candidates at least this likely to be used (in
  // [0, 1]; a batch union may exceed 1), and only for the next `prefetch_lookahead_layers`
  // layers (distance 1 .. this, >= 1).
  bool enable_prefetch = true;
  double min_prefetch_probability = 0.2;
  int32_t prefetch_lookahead_layers = 4;
};

// Counters since the policy was created.
struct ExpertCacheStats {
  int64_t hits = 0;    // Access found the expert resident
  int64_t misses = 0;  // Access loaded it on demand
  int64_t evictions = 0;
  int64_t prefetches_issued = 0;
  int64_t prefetches_used = 0;    // a prefetched expert accessed before it was evicted
  int64_t prefetches_wasted = 0;  // a prefetched expert evicted without an access
  int64_t prefetches_dropped = 0;  // candidates no slot could take (PrefetchPlan::num_dropped)
};

// What Access did.
struct ExpertAccess {
  bool hit = false;
  // On a miss with the cache full: the expert evicted to make room.
  std::optional<ExpertKey> evicted;
};

// What to load ahead of need and what to evict for it. Already applied to the policy's mirror
// when returned (the loads are resident, the evictions gone); the engine executes it.
struct ExpertPrefetchPlan {
  // Most urgent first.
  ExpertPrefetchHints loads;
  // Resident experts dropped to make room, in order (never pinned).
  std::vector<ExpertKey> evictions;
  // Candidates within `max_loads` that no slot could take: every slot pinned, or every
  // evictable expert predicted to be more useful than the candidate.
  int32_t num_dropped = 0;
  // Planning stopped because the cache was full and every slot pinned.
  bool all_pinned = false;
};

class ExpertCachePolicy {
 public:
  // "activation", "lru" or "lfu"; InvalidArgument for another name or a config outside the
  // ranges documented on its fields.
  static absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> Create(
      std::string_view name, const ExpertCacheConfig& config);
  // The names Create accepts.
  static std::vector<std::string_view> Names();

  virtual ~ExpertCachePolicy() = default;
  virtual std::string_view name() const = 0;

  // The step needs `key` now (an on-demand access). A hit records the use; a miss makes it
  // resident, evicting the expert the policy ranks first when the cache is full.
  // InvalidArgument for a key outside the model; ResourceExhausted, with nothing changed, when
  // a slot is needed and every slot is pinned.
  absl::StatusOr<ExpertAccess> Access(ExpertKey key);

  // Pin / unpin a resident expert (nested: each Pin needs an Unpin). FailedPrecondition for an
  // expert that is not resident or not pinned; InvalidArgument for a key outside the model.
  absl::Status Pin(ExpertKey key);
  absl::Status Unpin(ExpertKey key);

  // The batch's latest forecast (ExpertPredictor, united over the batch's requests). Only
  // "activation" uses it; InvalidArgument on a shape mismatch.
  absl::Status SetForecast(ExpertForecast forecast);

  // Up to `max_loads` (>= 0) experts to load now, and the evictions that make room; see
  // ExpertPrefetchPlan. "lru" and "lfu" never prefetch (an empty plan).
  virtual ExpertPrefetchPlan PlanPrefetch(int32_t max_loads) { return {}; }

  // Whether SetForecast changes anything ("activation"); a caller may skip predicting for the
  // others.
  virtual bool UsesForecast() const { return false; }

  // How much the policy wants resident `key` kept (higher = keep longer), for the engine's
  // expert store, which evicts the lowest-scored unpinned expert and breaks ties by recency
  // (engine/api/expert_hints.h, ExpertScore). The score follows the first key of the policy's
  // eviction order: "activation" the forecast's Priority (0 before any forecast, so the store
  // falls back to recency, as the policy does), "lru" the clock of the last access or load,
  // "lfu" the number of accesses. So for two resident experts whose scores differ, the lower
  // one is the one the policy evicts first. Keys outside the model score 0.
  virtual double KeepScore(ExpertKey key) const = 0;

  const ExpertCacheConfig& config() const { return config_; }
  int32_t capacity_slots() const { return config_.capacity_slots; }
  int32_t num_resident() const { return num_resident_; }
  bool IsResident(ExpertKey key) const { return InModel(key) && slot(key).resident; }
  int32_t pin_count(ExpertKey key) const { return InModel(key) ? slot(key).pins : 0; }
  // Resident experts in key order.
  std::vector<ExpertKey> Resident() const;
  // Prefetched experts still resident and not yet accessed.
  int32_t num_prefetched_unused() const;
  const ExpertCacheStats& stats() const { return stats_; }

 protected:
  // Per-expert state, resident or not.
  struct Slot {
    bool resident = false;
    int32_t pins = 0;
    int64_t last_use = 0;       // clock of the last access or load (0: never)
    int64_t num_accesses = 0;   // since the policy started, kept across evictions
    bool prefetched_unused = false;
  };

  explicit ExpertCachePolicy(const ExpertCacheConfig& config);

  // True when resident, unpinned `a` goes before `b` for eviction (a strict weak order; the base
  // breaks remaining ties by key).
  virtual bool EvictsBefore(ExpertKey a, ExpertKey b) const = 0;

  // The resident, unpinned expert to evict first, or none.
  std::optional<ExpertKey> Victim() const;
  void Evict(ExpertKey key);
  // Makes a non-resident `key` resident in a free slot (the caller made room).
  void Load(ExpertKey key, bool prefetched);

  bool InModel(ExpertKey key) const {
    return key.layer >= 0 && key.layer < config_.num_layers && key.expert >= 0 &&
           key.expert < config_.num_experts;
  }
  const Slot& slot(ExpertKey key) const { return slots_[Index(key)]; }
  bool full() const { return num_resident_ == config_.capacity_slots; }
  const ExpertForecast* forecast() const { return has_forecast_ ? &forecast_ : nullptr; }
  ExpertCacheStats& mutable_stats() { return stats_; }

 private:
  size_t Index(ExpertKey key) const {
    return static_cast<size_t>(key.layer) * config_.num_experts + key.expert;
  }
  Slot& mutable_slot(ExpertKey key) { return slots_[Index(key)]; }
  absl::Status CheckKey(ExpertKey key) const;

  ExpertCacheConfig config_;
  std::vector<Slot> slots_;  // [num_layers, num_experts]
  int32_t num_resident_ = 0;
  int64_t clock_ = 0;
  ExpertForecast forecast_;
  bool has_forecast_ = false;
  ExpertCacheStats stats_;
};

}  // namespace loom
