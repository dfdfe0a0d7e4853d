// Threshold scans over the vocabulary: gathering a band of weights, counting and finding values
// above a threshold. Same vector scheme as reductions.cc (4 lanes, or 8 with AVX2 chosen at
// run time); the results are integers and exact at either width.
//
// Gathering and finding usually hit few entries, so each kStep chunk is first tested with one
// vector compare per vector and only a chunk with a hit is walked element by element.
#include <cstring>

#include "engine/sampling/sampler_internal.h"

namespace loom::sampling_internal {
namespace {

// Appends to `keys` the sort keys of the tokens with lo <= w < hi, in id order; returns how many.
template <typename V>
LOOM_SAMPLING_INLINE int32_t GatherBand(const float* w, size_t n, float lo, float hi,
                                        uint64_t* keys) {
  constexpr size_t kLanes = kNumLanes<V>;
  int32_t count = 0;
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    uint32_t bits = 0;
    for (size_t v = 0; v < kStep / kLanes; ++v) {
      V value;
      std::memcpy(&value, w + i + v * kLanes, sizeof(V));
      bits |= LaneBits((value >= lo) & (value < hi)) << (v * kLanes);
    }
    for (; bits != 0; bits &= bits - 1) {
      const size_t j = i + static_cast<size_t>(__builtin_ctz(bits));
      keys[count++] = WeightKey(w[j], static_cast<int32_t>(j));
    }
  }
  for (; i < n; ++i) {
    if (w[i] >= lo && w[i] < hi) keys[count++] = WeightKey(w[i], static_cast<int32_t>(i));
  }
  return count;
}

// Number of x >= threshold (kOrEqual) or x > threshold, with Sanitize(x) when kSanitize.
template <typename V, bool kSanitize, bool kOrEqual>
LOOM_SAMPLING_INLINE int32_t CountPass(const float* x, size_t n, float threshold) {
  constexpr size_t kLanes = kNumLanes<V>;
  IntVec<V> acc[kStep / kLanes] = {};
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    for (size_t v = 0; v < kStep / kLanes; ++v) {
      V value;
      std::memcpy(&value, x + i + v * kLanes, sizeof(V));
      if constexpr (kSanitize) SanitizeInPlace(value);
      if constexpr (kOrEqual) {
        acc[v] -= value >= threshold;  // a true lane is -1
      } else {
        acc[v] -= value > threshold;
      }
    }
  }
  int32_t count = 0;
  for (const IntVec<V>& a : acc) {
    for (size_t j = 0; j < kLanes; ++j) count += a[j];
  }
  for (; i < n; ++i) {
    const float value = kSanitize ? Sanitize(x[i]) : x[i];
    count += (kOrEqual ? value >= threshold : value > threshold) ? 1 : 0;
  }
  return count;
}

// The first i >= begin with Sanitize(x[i]) > threshold, or n.
template <typename V>
LOOM_SAMPLING_INLINE size_t FindPass(const float* x, size_t n, size_t begin, float threshold) {
  constexpr size_t kLanes = kNumLanes<V>;
  size_t i = begin;
  for (; i + kStep <= n; i += kStep) {
    IntVec<V> hit = {};
    for (size_t v = 0; v < kStep / kLanes; ++v) {
      V value;
      std::memcpy(&value, x + i + v * kLanes, sizeof(V));
      SanitizeInPlace(value);
      hit |= value > threshold;
    }
    if (AnyLane(hit)) break;
  }
  for (; i < n; ++i) {
    if (Sanitize(x[i]) > threshold) return i;
  }
  return n;
}

template <typename V>
LOOM_SAMPLING_INLINE int32_t CountAboveDispatch(const float* x, size_t n, float threshold,
                                                bool or_equal) {
  return or_equal ? CountPass<V, true, true>(x, n, threshold)
                  : CountPass<V, true, false>(x, n, threshold);
}

#if LOOM_SAMPLING_HAS_AVX2
[[gnu::target("avx2")]] int32_t GatherBandAvx2(const float* w, size_t n, float lo, float hi,
                                               uint64_t* keys) {
  return GatherBand<Vec8f>(w, n, lo, hi, keys);
}
[[gnu::target("avx2")]] int32_t CountAtLeastAvx2(const float* w, size_t n, float threshold) {
  return CountPass<Vec8f, false, true>(w, n, threshold);
}
[[gnu::target("avx2")]] int32_t CountAboveAvx2(const float* x, size_t n, float threshold,
                                               bool or_equal) {
  return CountAboveDispatch<Vec8f>(x, n, threshold, or_equal);
}
[[gnu::target("avx2")]] size_t FindAboveAvx2(const float* x, size_t n, size_t begin,
                                             float threshold) {
  return FindPass<Vec8f>(x, n, begin, threshold);
}
#endif

}  // namespace

int32_t GatherKeys(std::span<const float> weights, float lo, float hi, uint64_t* keys) {
#if LOOM_SAMPLING_HAS_AVX2
  if (UseAvx2()) return GatherBandAvx2(weights.data(), weights.size(), lo, hi, keys);
#endif
  return GatherBand<Vec4f>(weights.data(), weights.size(), lo, hi, keys);
}

int32_t CountAtLeast(std::span<const float> weights, float threshold) {
#if LOOM_SAMPLING_HAS_AVX2
  if (UseAvx2()) return CountAtLeastAvx2(weights.data(), weights.size(), threshold);
#endif
  return CountPass<Vec4f, false, true>(weights.data(), weights.size(), threshold);
}

int32_t CountAbove(std::span<const float> logits, float threshold, bool or_equal) {
#if LOOM_SAMPLING_HAS_AVX2
  if (UseAvx2()) return CountAboveAvx2(logits.data(), logits.size(), threshold, or_equal);
#endif
  return CountAboveDispatch<Vec4f>(logits.data(), logits.size(), threshold, or_equal);
}

size_t FindAbove(std::span<const float> logits, size_t begin, float threshold) {
#if LOOM_SAMPLING_HAS_AVX2
  if (UseAvx2()) return FindAboveAvx2(logits.data(), logits.size(), begin, threshold);
#endif
  return FindPass<Vec4f>(logits.data(), logits.size(), begin, threshold);
}

}  // namespace loom::sampling_internal
