// Error measures shared by the parity tests (kernels: CPU in tests/kernels, CUDA in tests/gpu;
// logits: tests/engine and tests/golden).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace loom::test {

// Largest |got - want| relative to max(1, max |want|). A NaN on either side (which std::max would
// silently skip) or a size mismatch counts as an infinite difference.
inline float MaxRelDiff(const std::vector<float>& got, const std::vector<float>& want) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (got.size() != want.size()) return kInf;
  float max_diff = 0.0f, max_ref = 1.0f;
  for (size_t i = 0; i < got.size(); ++i) {
    const float diff = std::fabs(got[i] - want[i]);
    if (std::isnan(diff)) return kInf;
    max_diff = std::max(max_diff, diff);
    max_ref = std::max(max_ref, std::fabs(want[i]));
  }
  return max_diff / max_ref;
}

// Largest |got[i] - want[i]| over n elements. A NaN on either side counts as an infinite
// difference (std::max alone would skip it, and a test would pass on NaN output).
inline float MaxAbsDiff(const float* got, const float* want, size_t n) {
  float max_diff = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float diff = std::fabs(got[i] - want[i]);
    if (std::isnan(diff)) return std::numeric_limits<float>::infinity();
    max_diff = std::max(max_diff, diff);
  }
  return max_diff;
}

// The same over two vectors; a size mismatch counts as an infinite difference.
inline float MaxAbsDiff(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<float>::infinity();
  return MaxAbsDiff(got.data(), want.data(), got.size());
}

}  // namespace loom::test
