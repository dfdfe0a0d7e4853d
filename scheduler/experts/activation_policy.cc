#include "scheduler/experts/activation_policy.h"

#include <algorithm>
#include <tuple>
#include <vector>

namespace loom {
namespace {

class ActivationPolicy final : public ExpertCachePolicy {
 public:
  explicit ActivationPolicy(const ExpertCacheConfig& config) : ExpertCachePolicy(config) {}
  std::string_view name() const override { return "activation"; }

  ExpertPrefetchPlan PlanPrefetch(int32_t max_loads) override;
  bool UsesForecast() const override { return true; }
  double KeepScore(ExpertKey key) const override {
    const ExpertForecast* f = forecast();
    return f != nullptr && InModel(key) ? f->Priority(key) : 0.0;
  }

 protected:
  bool EvictsBefore(ExpertKey a, ExpertKey b) const override;

 private:
  struct Candidate {
    double priority;
    int32_t distance;
    ExpertKey key;
  };
  std::vector<Candidate> Candidates(const ExpertForecast& forecast) const;
};

bool ActivationPolicy::EvictsBefore(ExpertKey a, ExpertKey b) const {
  if (const ExpertForecast* f = forecast(); f != nullptr) {
    const double pa = f->Priority(a);
    const double pb = f->Priority(b);
    if (pa != pb) return pa < pb;
    const int32_t da = f->LayerDistance(a.layer);
    const int32_t db = f->LayerDistance(b.layer);
    if (da != db) return da > db;
  }
  return slot(a).last_use < slot(b).last_use;
}

std::vector<ActivationPolicy::Candidate> ActivationPolicy::Candidates(
    const ExpertForecast& forecast) const {
  std::vector<Candidate> out;
  const int32_t num_layers = config().num_layers;
  const int32_t lookahead = std::min(config().prefetch_lookahead_layers, num_layers - 1);
  for (int32_t d = 1; d <= lookahead; ++d) {
    const int32_t layer = (forecast.current_layer() + d) % num_layers;
    for (int32_t e = 0; e < config().num_experts; ++e) {
      const ExpertKey key{layer, e};
      if (IsResident(key) || forecast.probability(key) < config().min_prefetch_probability ||
          forecast.probability(key) <= 0.0) {
        continue;
      }
      out.push_back({forecast.Priority(key), d, key});
    }
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(b.priority, a.distance, a.key) < std::tie(a.priority, b.distance, b.key);
  });
  return out;
}

ExpertPrefetchPlan ActivationPolicy::PlanPrefetch(int32_t max_loads) {
  ExpertPrefetchPlan plan;
  const ExpertForecast* f = forecast();
  if (!config().enable_prefetch || f == nullptr || max_loads <= 0) return plan;
  const std::vector<Candidate> candidates = Candidates(*f);
  const int32_t limit = std::min<int32_t>(max_loads, static_cast<int32_t>(candidates.size()));
  int32_t i = 0;
  for (; i < limit; ++i) {
    const Candidate& c = candidates[i];
    if (full()) {
      const std::optional<ExpertKey> victim = Victim();
      if (!victim.has_value()) {
        plan.all_pinned = true;
        break;
      }
      // Not Priority: see the header (a far expert of a layer just run is likely, not useless).
      if (!(f->probability(*victim) < f->probability(c.key))) break;
      Evict(*victim);
      plan.evictions.push_back(*victim);
    }
    Load(c.key, /*prefetched=*/true);
    plan.loads.push_back({c.key, c.priority});
  }
  plan.num_dropped = limit - i;
  mutable_stats().prefetches_dropped += plan.num_dropped;
  return plan;
}

}  // namespace

std::unique_ptr<ExpertCachePolicy> MakeActivationPolicy(const ExpertCacheConfig& config) {
  return std::make_unique<ActivationPolicy>(config);
}

}  // namespace loom
