#include "engine/experts/resident_experts.h"

#include "engine/common/logging.h"

namespace loom {

ResidentExpertProvider::ResidentExpertProvider(std::span<const ExpertWeights> experts,
                                               int32_t num_experts)
    : experts_(experts), num_experts_(num_experts) {}

absl::StatusOr<const ExpertWeights*> ResidentExpertProvider::Get(int32_t layer, int32_t expert) {
  const int64_t index = int64_t{layer} * num_experts_ + expert;
  LOOM_CHECK(expert >= 0 && expert < num_experts_ && index >= 0 &&
                 index < static_cast<int64_t>(experts_.size()),
             "expert ", expert, " of layer ", layer, " out of range");
  const ExpertWeights& weights = experts_[static_cast<size_t>(index)];
  LOOM_CHECK(weights.gate.weight.data != nullptr, "layer ", layer, " has no experts");
  return &weights;
}

}  // namespace loom
