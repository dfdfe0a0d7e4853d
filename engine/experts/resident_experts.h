// The all-resident ExpertProvider: every expert of every sparse layer stays where the loader bound
// it (views into the checkpoint's mapping, engine/models/moe_weights.h), so Get never waits and
// never fails. The weights it points into must outlive it.
#pragma once

#include <cstdint>
#include <span>

#include "engine/experts/expert_provider.h"

namespace loom {

class ResidentExpertProvider final : public ExpertProvider {
 public:
  // experts: [num_layers * num_experts], expert e of layer l at l * num_experts + e (entries of
  // dense layers are empty and never asked for).
  ResidentExpertProvider(std::span<const ExpertWeights> experts, int32_t num_experts);

  absl::StatusOr<const ExpertWeights*> Get(int32_t layer, int32_t expert) override;

 private:
  std::span<const ExpertWeights> experts_;
  int32_t num_experts_;
};

}  // namespace loom
