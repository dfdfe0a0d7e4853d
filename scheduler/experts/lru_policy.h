// The "lru" expert-cache policy: evicts the least recently used resident expert (the one whose
// last access, or load, is oldest). Never prefetches. A baseline for the activation policy.
// KeepScore is the clock of the last access or load: the least recently used scores lowest.
#pragma once

#include <memory>

#include "scheduler/experts/expert_cache_policy.h"

namespace loom {

// `config` was validated by ExpertCachePolicy::Create.
std::unique_ptr<ExpertCachePolicy> MakeLruPolicy(const ExpertCacheConfig& config);

}  // namespace loom
