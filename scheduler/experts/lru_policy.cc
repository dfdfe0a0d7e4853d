#include "scheduler/experts/lru_policy.h"

namespace loom {
namespace {

class LruPolicy final : public ExpertCachePolicy {
 public:
  explicit LruPolicy(const ExpertCacheConfig& config) : ExpertCachePolicy(config) {}
  std::string_view name() const override { return "lru"; }
  double KeepScore(ExpertKey key) const override {
    return InModel(key) ? static_cast<double>(slot(key).last_use) : 0.0;
  }

 protected:
  bool EvictsBefore(ExpertKey a, ExpertKey b) const override {
    return slot(a).last_use < slot(b).last_use;
  }
};

}  // namespace

std::unique_ptr<ExpertCachePolicy> MakeLruPolicy(const ExpertCacheConfig& config) {
  return std::make_unique<LruPolicy>(config);
}

}  // namespace loom
