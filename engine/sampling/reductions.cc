// Whole-vocabulary passes of the sampler: max, sum of exponentials, argmax, weights.
//
// Each pass walks the vocabulary in blocks of kBlock floats, kStep floats per iteration as
// 4-lane (SSE2 / NEON) or 8-lane (AVX2, chosen at run time by cpu::SelectedIsa) vectors. The
// kStep running sums are combined in one fixed order at the end of each block whatever the
// width, and no fused multiply-add is used, so both widths give bit-identical results (the
// tests compare every lane with the scalar code; LOOM_CPU_ISA=scalar runs them on the 4-lane
// path) and a result never depends on the machine's load or threads. A block's tail
// shorter than kStep goes through 4-lane vectors padded with -inf. Block sums are added in
// double, which keeps the relative error of a 150K-entry sum near that of one 512-entry block.
#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/sampling/sampler_internal.h"

namespace loom::sampling_internal {
namespace {

constexpr size_t kBlock = 512;  // a multiple of kStep
constexpr float kInf = std::numeric_limits<float>::infinity();

struct MaxResult {
  float max = -kInf;
  size_t block_begin = 0;  // start of the first block holding `max`
};

// Sum of kStep partial sums in a fixed tree order.
float SumPartials(const float* partials) {
  float pairs[kStep / 2];
  for (size_t j = 0; j < kStep / 2; ++j) pairs[j] = partials[2 * j] + partials[2 * j + 1];
  float quads[kStep / 4];
  for (size_t j = 0; j < kStep / 4; ++j) quads[j] = pairs[2 * j] + pairs[2 * j + 1];
  return (quads[0] + quads[1]) + (quads[2] + quads[3]);
}

// The largest x, NaN counting as -inf; with kSanitize, the largest Sanitize(x), each also stored
// to `out` (which may alias x).
template <typename V, bool kSanitize>
LOOM_SAMPLING_INLINE MaxResult MaxPass(const float* x, size_t n, float* out) {
  constexpr size_t kLanes = kNumLanes<V>;
  MaxResult result;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t end = std::min(n, begin + kBlock);
    V acc[kStep / kLanes];
    for (V& a : acc) a = V{} - kInf;
    size_t i = begin;
    for (; i + kStep <= end; i += kStep) {
      for (size_t v = 0; v < kStep / kLanes; ++v) {
        V value;
        std::memcpy(&value, x + i + v * kLanes, sizeof(V));
        if constexpr (kSanitize) {
          SanitizeInPlace(value);
          std::memcpy(out + i + v * kLanes, &value, sizeof(V));
        }
        acc[v] = value > acc[v] ? value : acc[v];  // keeps acc where value is NaN
      }
    }
    float block_max = -kInf;
    for (const V& a : acc) {
      for (size_t j = 0; j < kLanes; ++j) block_max = a[j] > block_max ? a[j] : block_max;
    }
    for (; i < end; ++i) {
      float value = x[i];
      if constexpr (kSanitize) out[i] = value = Sanitize(value);
      block_max = value > block_max ? value : block_max;
    }
    if (block_max > result.max) result = MaxResult{block_max, begin};
  }
  return result;
}

// Sum of exp((x - max) * scale) where max >= every x. With kStore the inputs must already be
// sanitized and each term is stored to `out` (which may alias x); without it NaN counts as -inf
// and +inf as the largest finite float.
template <typename V, bool kStore>
LOOM_SAMPLING_INLINE double ExpPass(const float* x, size_t n, float max, float scale, float* out) {
  constexpr size_t kLanes = kNumLanes<V>;
  const V vmax = V{} + max;
  const V vscale = V{} + scale;
  double total = 0.0;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t end = std::min(n, begin + kBlock);
    V acc[kStep / kLanes] = {};
    size_t i = begin;
    for (; i + kStep <= end; i += kStep) {
      for (size_t v = 0; v < kStep / kLanes; ++v) {
        V w;
        std::memcpy(&w, x + i + v * kLanes, sizeof(V));
        if constexpr (!kStore) SanitizeInPlace(w);
        w = (w - vmax) * vscale;
        ExpNonPositiveInPlace(w);
        if constexpr (kStore) std::memcpy(out + i + v * kLanes, &w, sizeof(V));
        acc[v] += w;
      }
    }
    float partials[kStep];
    std::memcpy(partials, acc, sizeof(partials));
    for (; i < end; i += 4) {
      const size_t len = std::min<size_t>(4, end - i);
      Vec4f w = Vec4f{} - kInf;
      for (size_t j = 0; j < len; ++j) w[j] = x[i + j];
      if constexpr (!kStore) SanitizeInPlace(w);
      w = (w - max) * scale;
      ExpNonPositiveInPlace(w);
      for (size_t j = 0; j < len; ++j) {
        if constexpr (kStore) out[i + j] = w[j];
        partials[j] += w[j];
      }
    }
    total += SumPartials(partials);
  }
  return total;
}

#if LOOM_SAMPLING_HAS_AVX2
// AVX2 without FMA: 8 lanes, the same operations per lane as the 4-lane code.
[[gnu::target("avx2")]] MaxResult MaxPassAvx2(const float* x, size_t n, float* out) {
  return out == nullptr ? MaxPass<Vec8f, false>(x, n, nullptr) : MaxPass<Vec8f, true>(x, n, out);
}
[[gnu::target("avx2")]] double ExpPassAvx2(const float* x, size_t n, float max, float scale,
                                           float* out) {
  return out == nullptr ? ExpPass<Vec8f, false>(x, n, max, scale, nullptr)
                        : ExpPass<Vec8f, true>(x, n, max, scale, out);
}
#endif

// out == nullptr: max of x (NaN as -inf); otherwise sanitizes x into out and returns its max.
MaxResult DispatchMaxPass(const float* x, size_t n, float* out) {
#if LOOM_SAMPLING_HAS_AVX2
  if (UseAvx2()) return MaxPassAvx2(x, n, out);
#endif
  return out == nullptr ? MaxPass<Vec4f, false>(x, n, nullptr) : MaxPass<Vec4f, true>(x, n, out);
}

// out == nullptr: sum of exp over raw x; otherwise over sanitized x, storing each term to out.
double DispatchExpPass(const float* x, size_t n, float max, float scale, float* out) {
#if LOOM_SAMPLING_HAS_AVX2
  if (UseAvx2()) return ExpPassAvx2(x, n, max, scale, out);
#endif
  return out == nullptr ? ExpPass<Vec4f, false>(x, n, max, scale, nullptr)
                        : ExpPass<Vec4f, true>(x, n, max, scale, out);
}

}  // namespace

float MaxLogit(std::span<const float> logits) {
  return DispatchMaxPass(logits.data(), logits.size(), nullptr).max;
}

double SumExpShifted(std::span<const float> logits, float max) {
  return DispatchExpPass(logits.data(), logits.size(), max, 1.0f, nullptr);
}

int32_t Argmax(std::span<const float> logits) {
  const MaxResult max = DispatchMaxPass(logits.data(), logits.size(), nullptr);
  if (max.max == -kInf) return -1;
  const auto it = std::find(logits.begin() + max.block_begin, logits.end(), max.max);
  return static_cast<int32_t>(it - logits.begin());
}

double ComputeWeights(std::span<float> logits, float temperature) {
  float* x = logits.data();
  const MaxResult max = DispatchMaxPass(x, logits.size(), x);
  if (max.max == -kInf) return 0.0;
  // The reciprocal is capped so that a subnormal temperature still maps max to exp(0) = 1.
  const float scale = std::min(1.0f / temperature, std::numeric_limits<float>::max());
  return DispatchExpPass(x, logits.size(), max.max, scale, x);
}

}  // namespace loom::sampling_internal
