// Expert prefetch hints: what the scheduler's expert-cache policy tells the engine's expert
// store to load ahead of need (shared/ARCHITECTURE.md §3, "expert prefetch hints").
//
// Plain data, no behaviour. An expert is named by (layer, expert): `layer` counts the model's
// sparse (MoE) layers only, in decoder order (0 = the first sparse layer, whatever dense layers
// come before or between: ModelInfo::sparse_layers says which decoder layers they are), and
// `expert` is the routed expert's index inside it, as the router numbers them. A
// hint list is ordered most urgent first; the engine loads in that order, may drop hints it has
// no room or bandwidth for (a dropped hint costs a later on-demand load, never a wrong result),
// and always serves an on-demand load (an expert the running step needs) before any hint.
#pragma once

#include <compare>
#include <cstdint>
#include <ostream>
#include <utility>
#include <vector>

namespace loom {

// One routed expert of one MoE layer.
struct ExpertKey {
  int32_t layer = 0;
  int32_t expert = 0;

  friend auto operator<=>(const ExpertKey&, const ExpertKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const ExpertKey& key) {
    return H::combine(std::move(h), key.layer, key.expert);
  }
  friend std::ostream& operator<<(std::ostream& os, const ExpertKey& key) {
    return os << "L" << key.layer << "/E" << key.expert;
  }
};

// Load `key` into the fast tier before it is needed. `urgency` > 0 orders hints (larger is
// sooner); the scheduler's activation policy uses the expert's predicted use weighted by how
// close its layer is to the one running (scheduler/experts/expert_predictor.h).
struct ExpertPrefetchHint {
  ExpertKey key;
  double urgency = 0.0;
};

// What a step plan carries: hints, most urgent first, each key at most once.
using ExpertPrefetchHints = std::vector<ExpertPrefetchHint>;

// How much the policy wants a resident expert kept (higher = keep longer). The engine's expert
// store evicts the lowest-scored unpinned expert; the activation policy scores by predicted
// future use, LRU by recency, LFU by use count, so the store evicts what the policy would.
struct ExpertScore {
  ExpertKey key;
  double score = 0.0;
};
using ExpertScores = std::vector<ExpertScore>;

// The engine's expert cache, cumulative since start (StepResult::expert_cache). A prefetch is
// used when a step needed the expert it loaded before it was evicted, wasted when evicted unused,
// cancelled when a newer hint list replaced it before its load started, dropped when no slot
// could take it.
struct ExpertCacheCounters {
  int32_t slots = 0;     // experts the fast tier holds
  int32_t resident = 0;  // experts in it now
  int64_t slot_bytes = 0;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
  int64_t prefetches_issued = 0;
  int64_t prefetches_used = 0;
  int64_t prefetches_wasted = 0;
  int64_t prefetches_cancelled = 0;
  int64_t prefetches_dropped = 0;
  int64_t computed_at_home = 0;  // experts computed on the host where they live, not loaded
  int64_t bytes_loaded = 0;
  double load_seconds = 0;
  double wait_seconds = 0;  // time the step waited for experts to arrive
};

}  // namespace loom
