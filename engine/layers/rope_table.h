// Rotary-embedding angles: the inverse frequencies of a RopeConfig (with linear or llama3
// scaling) and the cos/sin of each token's position, computed per step for the positions in it.
//
// The arithmetic follows Hugging Face transformers in float32, operation for operation
// (inv_freq = 1 / theta^(2i/d); scaling; angle = float(pos) * inv_freq), so the angles match the
// reference bit for bit up to the last-ulp behaviour of pow/cos/sin.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/models/model_config.h"

namespace loom {

class RopeTable {
 public:
  RopeTable(const RopeConfig& config, int32_t rotary_dim);

  int32_t rotary_dim() const { return rotary_dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

  // cos/sin[t, i] for i < rotary_dim / 2 of positions[t]; outputs [num_tokens, rotary_dim / 2].
  void Fill(const int32_t* positions, int32_t num_tokens, float* cos, float* sin) const;

 private:
  int32_t rotary_dim_;
  std::vector<float> inv_freq_;
};

}  // namespace loom
