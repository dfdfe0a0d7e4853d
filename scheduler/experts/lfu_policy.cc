#include "scheduler/experts/lfu_policy.h"

namespace loom {
namespace {

class LfuPolicy final : public ExpertCachePolicy {
 public:
  explicit LfuPolicy(const ExpertCacheConfig& config) : ExpertCachePolicy(config) {}
  std::string_view name() const override { return "lfu"; }
  double KeepScore(ExpertKey key) const override {
    return InModel(key) ? static_cast<double>(slot(key).num_accesses) : 0.0;
  }

 protected:
  bool EvictsBefore(ExpertKey a, ExpertKey b) const override {
    const Slot& x = slot(a);
    const Slot& y = slot(b);
    if (x.num_accesses != y.num_accesses) return x.num_accesses < y.num_accesses;
    return x.last_use < y.last_use;
  }
};

}  // namespace

std::unique_ptr<ExpertCachePolicy> MakeLfuPolicy(const ExpertCacheConfig& config) {
  return std::make_unique<LfuPolicy>(config);
}

}  // namespace loom
