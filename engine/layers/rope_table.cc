#include "engine/layers/rope_table.h"

#include <cmath>
#include <numbers>

namespace loom {
namespace {

// Llama 3.1 frequency scaling: long wavelengths are divided by `factor`, short ones kept, and the
// band between them interpolated. float32 throughout, in the reference's order of operations.
float Llama3Scale(float inv_freq, const RopeConfig& c) {
  const float factor = static_cast<float>(c.factor);
  const float low = static_cast<float>(c.low_freq_factor);
  const float high = static_cast<float>(c.high_freq_factor);
  const float old_len = static_cast<float>(c.original_max_position_embeddings);
  const float low_freq_wavelen = static_cast<float>(c.original_max_position_embeddings / c.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(c.original_max_position_embeddings / c.high_freq_factor);
  const float wavelen = static_cast<float>(2 * std::numbers::pi) / inv_freq;
  const float scaled = wavelen > low_freq_wavelen ? inv_freq / factor : inv_freq;
  const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
  if (!medium) return scaled;
  const float smooth = (old_len / wavelen - low) / (high - low);
  return (1.0f - smooth) * scaled / factor + smooth * scaled;
}

}  // namespace

RopeTable::RopeTable(const RopeConfig& config, int32_t rotary_dim) : rotary_dim_(rotary_dim) {
  const int32_t half = rotary_dim / 2;
  inv_freq_.resize(half);
  for (int32_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    const float power = static_cast<float>(std::pow(config.theta, static_cast<double>(exponent)));
    float inv = 1.0f / power;
    switch (config.scaling) {
      case RopeConfig::Scaling::kNone:
        break;
      case RopeConfig::Scaling::kLinear:
        inv /= static_cast<float>(config.factor);
        break;
      case RopeConfig::Scaling::kLlama3:
        inv = Llama3Scale(inv, config);
        break;
    }
    if (static_cast<size_t>(i) < config.freq_factors.size()) inv /= config.freq_factors[i];
    inv_freq_[i] = inv;
  }
}

void RopeTable::Fill(const int32_t* positions, int32_t num_tokens, float* cos, float* sin) const {
  const int32_t half = rotary_dim_ / 2;
  for (int32_t t = 0; t < num_tokens; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int32_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq_[i];
      cos[int64_t{t} * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[int64_t{t} * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

}  // namespace loom
