// The "activation" expert-cache policy (MoE-Infinity): eviction and prefetch follow the batch's
// predicted expert use (ExpertForecast, set with ExpertCachePolicy::SetForecast).
//
// Eviction: the resident, unpinned expert with the lowest Priority (the soonest expected next use
// first kept, ExpertForecast::Priority), ties by the larger layer distance from the current layer
// (it is needed latest), then least recently used. Before any forecast: least recently used.
//
// Prefetch (PlanPrefetch(max_loads)): candidates are the non-resident experts of the layers at
// distance 1 .. prefetch_lookahead_layers whose probability is at least
// min_prefetch_probability, most urgent (highest Priority) first, ties by nearer layer, then key.
// Each is loaded into a free slot, or else in place of the eviction victim above — but only when
// the victim's probability of use is strictly lower than the candidate's. Layer distance orders
// the work; it does not justify trading one likely expert for another: when the cache is smaller
// than a request's working set, evicting an expert of a layer just run (distance L - 1) for a
// nearer but no likelier candidate only moves the miss to the next token and costs a load
// (MoE-Infinity compares a priority linear in distance here; on the simulator's Mixtral-shaped
// traces at 25 % residency that issued about twice the loads of demand paging,
// bench/results/expert_cache_sim.md). Planning stops at `max_loads` loads or at the first
// candidate no slot can take; the candidates from there on (up to `max_loads` in all) are counted
// as dropped. Hint urgency is the candidate's Priority, and so is KeepScore (0 before any
// forecast), so the engine compares a hint's urgency and a resident expert's score in one unit.
#pragma once

#include <memory>

#include "scheduler/experts/expert_cache_policy.h"

namespace loom {

// `config` was validated by ExpertCachePolicy::Create.
std::unique_ptr<ExpertCachePolicy> MakeActivationPolicy(const ExpertCacheConfig& config);

}  // namespace loom
