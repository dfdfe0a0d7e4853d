#include "scheduler/experts/expert_cache_policy.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "scheduler/experts/activation_policy.h"
#include "scheduler/experts/lfu_policy.h"
#include "scheduler/experts/lru_policy.h"

namespace loom {
namespace {

absl::Status CheckConfig(const ExpertCacheConfig& config) {
  if (config.num_layers <= 0 || config.num_experts <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("expert cache needs positive dimensions, got ",
                                                   config.num_layers, " layers x ",
                                                   config.num_experts, " experts"));
  }
  const int64_t num_total = static_cast<int64_t>(config.num_layers) * config.num_experts;
  if (config.capacity_slots < 1 || config.capacity_slots > num_total) {
    return absl::InvalidArgumentError(absl::StrCat("expert cache capacity must be in [1, ",
                                                   num_total, "] slots, got ",
                                                   config.capacity_slots));
  }
  if (!(config.min_prefetch_probability >= 0.0 && config.min_prefetch_probability <= 1.0) ||
      config.prefetch_lookahead_layers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert prefetch config out of range: min_prefetch_probability ",
        config.min_prefetch_probability, " (in [0, 1]), prefetch_lookahead_layers ",
        config.prefetch_lookahead_layers, " (>= 1)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string_view> ExpertCachePolicy::Names() { return {"activation", "lru", "lfu"}; }

absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> ExpertCachePolicy::Create(
    std::string_view name, const ExpertCacheConfig& config) {
  if (absl::Status status = CheckConfig(config); !status.ok()) return status;
  if (name == "activation") return MakeActivationPolicy(config);
  if (name == "lru") return MakeLruPolicy(config);
  if (name == "lfu") return MakeLfuPolicy(config);
  std::string known;
  for (std::string_view known_name : Names()) {
    absl::StrAppend(&known, known.empty() ? "" : ", ", std::string(known_name));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown expert cache policy '",
                                                 std::string(name), "' (one of: ", known, ")"));
}

ExpertCachePolicy::ExpertCachePolicy(const ExpertCacheConfig& config)
    : config_(config),
      slots_(static_cast<size_t>(config.num_layers) * config.num_experts) {}

absl::Status ExpertCachePolicy::CheckKey(ExpertKey key) const {
  if (InModel(key)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("expert L", key.layer, "/E", key.expert,
                                                 " is outside the model's ", config_.num_layers,
                                                 " layers x ", config_.num_experts, " experts"));
}

absl::StatusOr<ExpertAccess> ExpertCachePolicy::Access(ExpertKey key) {
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  Slot& s = mutable_slot(key);
  if (s.resident) {
    ++stats_.hits;
    if (s.prefetched_unused) {
      ++stats_.prefetches_used;
      s.prefetched_unused = false;
    }
    s.last_use = ++clock_;
    ++s.num_accesses;
    ExpertAccess hit;
    hit.hit = true;
    return hit;
  }
  ExpertAccess access;
  if (full()) {
    std::optional<ExpertKey> victim = Victim();
    if (!victim.has_value()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "expert cache: all ", config_.capacity_slots, " slots are pinned, no room for expert L",
          key.layer, "/E", key.expert));
    }
    Evict(*victim);
    access.evicted = victim;
  }
  ++stats_.misses;
  Load(key, /*prefetched=*/false);
  ++s.num_accesses;
  return access;
}

absl::Status ExpertCachePolicy::Pin(ExpertKey key) {
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  Slot& s = mutable_slot(key);
  if (!s.resident) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot pin expert L", key.layer, "/E", key.expert, ": not resident"));
  }
  ++s.pins;
  return absl::OkStatus();
}

absl::Status ExpertCachePolicy::Unpin(ExpertKey key) {
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  Slot& s = mutable_slot(key);
  if (s.pins == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot unpin expert L", key.layer, "/E", key.expert, ": not pinned"));
  }
  --s.pins;
  return absl::OkStatus();
}

absl::Status ExpertCachePolicy::SetForecast(ExpertForecast forecast) {
  if (forecast.num_layers() != config_.num_layers ||
      forecast.num_experts() != config_.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "forecast is ", forecast.num_layers(), " x ", forecast.num_experts(),
        ", the expert cache ", config_.num_layers, " x ", config_.num_experts));
  }
  forecast_ = std::move(forecast);
  has_forecast_ = true;
  return absl::OkStatus();
}

std::vector<ExpertKey> ExpertCachePolicy::Resident() const {
  std::vector<ExpertKey> out;
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    for (int32_t e = 0; e < config_.num_experts; ++e) {
      if (slot({l, e}).resident) out.push_back({l, e});
    }
  }
  return out;
}

int32_t ExpertCachePolicy::num_prefetched_unused() const {
  int32_t n = 0;
  for (const Slot& s : slots_) n += (s.resident && s.prefetched_unused) ? 1 : 0;
  return n;
}

std::optional<ExpertKey> ExpertCachePolicy::Victim() const {
  std::optional<ExpertKey> best;
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    for (int32_t e = 0; e < config_.num_experts; ++e) {
      const ExpertKey key{l, e};
      const Slot& s = slot(key);
      if (!s.resident || s.pins > 0) continue;
      // Keys are visited in increasing order, so a tie keeps the smaller key.
      if (!best.has_value() || EvictsBefore(key, *best)) best = key;
    }
  }
  return best;
}

void ExpertCachePolicy::Evict(ExpertKey key) {
  Slot& s = mutable_slot(key);
  if (s.prefetched_unused) ++stats_.prefetches_wasted;
  s.resident = false;
  s.prefetched_unused = false;
  --num_resident_;
  ++stats_.evictions;
}

void ExpertCachePolicy::Load(ExpertKey key, bool prefetched) {
  Slot& s = mutable_slot(key);
  s.resident = true;
  s.prefetched_unused = prefetched;
  s.last_use = ++clock_;
  ++num_resident_;
  if (prefetched) ++stats_.prefetches_issued;
}

}  // namespace loom
