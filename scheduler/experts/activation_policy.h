// The "activation" expert-cache policy (MoE-Infinity): eviction and prefetch follow the batch's
// predicted expert use (ExpertForecast, set with ExpertCachePolicy::SetForecast).
//
// Eviction: the resident, unpinned expert with the lowest Priority (predicted probability of use
// times the proximity weight of its layer), ties by the larger layer distance from the current
// layer (it is needed latest), then least recently used. Before any forecast: least recently
// used.
//
// Prefetch (PlanPrefetch(max_loads)): candidates are the non-resident experts of the layers at
// distance 1 .. prefetch_lookahead_layers whose probability is at least
// min_prefetch_probability, most urgent (highest Priority) first, ties by nearer layer, then key.
// Each is loaded into a free slot, or else in place of the eviction victim above — but only when
// the victim's Priority is strictly lower than the candidate's, so a prefetch never pushes out
// something predicted to be more useful (and never one this plan just loaded). Planning stops at
// `max_loads` loads or at the first candidate no slot can take; the candidates from there on (up
// to `max_loads` in all) are counted as dropped. Hint urgency is the candidate's Priority.
#pragma once

#include <memory>

#include "scheduler/experts/expert_cache_policy.h"

namespace loom {

// `config` was validated by ExpertCachePolicy::Create.
std::unique_ptr<ExpertCachePolicy> MakeActivationPolicy(const ExpertCacheConfig& config);

}  // namespace loom
