// The "lfu" expert-cache policy: evicts the resident expert accessed the fewest times since the
// policy started (counts are kept for every expert, also while it is not resident, so an expert
// that was popular and evicted comes back with its history), ties by least recently used. Never
// prefetches. A baseline for the activation policy; with a stationary, skewed popularity it keeps
// the globally hottest experts. KeepScore is the access count (ties are the store's: recency).
#pragma once

#include <memory>

#include "scheduler/experts/expert_cache_policy.h"

namespace loom {

// `config` was validated by ExpertCachePolicy::Create.
std::unique_ptr<ExpertCachePolicy> MakeLfuPolicy(const ExpertCacheConfig& config);

}  // namespace loom
