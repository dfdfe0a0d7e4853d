// Short f32 vectors for the sampler's whole-vocabulary loops, and exp over them.
//
// GCC/Clang vector extensions rather than intrinsics: one template body serves 4 lanes (SSE2,
// the x86-64 baseline, or NEON) and 8 lanes (inlined into AVX2 functions, see reductions.cc),
// and it vectorises where the compiler would otherwise leave a loop scalar under the default
// -ftrapping-math (it will not turn a conditional exp into a select).
//
// Every operation is lane-wise IEEE f32 without fused multiply-add, so a lane computes the same
// bits at either width, and a scalar result that must agree with a vector one is computed
// through the same code (the float overloads run lane 0 of the 4-lane version).
//
// The vector helpers work in place through references: a function that passes or returns a
// 32-byte vector by value outside an AVX function draws an ABI warning from GCC, although these
// are always inlined and no such call is ever made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/cpu_features.h"

#define LOOM_SAMPLING_INLINE [[gnu::always_inline]] inline

// Whether 8-lane AVX2 entry points are compiled (x86-64 with GCC or Clang).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LOOM_SAMPLING_HAS_AVX2 1
#else
#define LOOM_SAMPLING_HAS_AVX2 0
#endif

namespace loom::sampling_internal {

using Vec4f = float __attribute__((vector_size(16)));
using Vec8f = float __attribute__((vector_size(32)));

// Floats per loop iteration of every pass: 4 vectors of 4 lanes or 2 of 8.
inline constexpr size_t kStep = 16;

// Whether the 8-lane entry points may run (cpu::SelectedIsa, decided once per process).
inline bool UseAvx2() {
  static const bool use = cpu::SelectedIsa() >= cpu::Isa::kAvx2;
  return use;
}

// The integer vector with V's lane count, and that count.
template <typename V>
using IntVec = decltype(V{} < V{});
template <typename V>
inline constexpr size_t kNumLanes = sizeof(V) / sizeof(float);

// Bit j set when lane j of a comparison mask is set.
template <typename I>
LOOM_SAMPLING_INLINE uint32_t LaneBits(const I& mask) {
#if defined(__x86_64__)
  // SSE movmskps on each 4-lane half (baseline x86-64, so usable at either width).
  uint32_t bits = 0;
  for (size_t half = 0; half < sizeof(I) / sizeof(Vec4f); ++half) {
    Vec4f quarter;
    std::memcpy(&quarter, reinterpret_cast<const char*>(&mask) + half * sizeof(Vec4f),
                sizeof(Vec4f));
    bits |= static_cast<uint32_t>(__builtin_ia32_movmskps(quarter)) << (4 * half);
  }
  return bits;
#else
  uint32_t bits = 0;
  for (size_t j = 0; j < sizeof(I) / sizeof(int32_t); ++j) bits |= (mask[j] & 1u) << j;
  return bits;
#endif
}

// True when any lane of a comparison mask is set.
template <typename I>
LOOM_SAMPLING_INLINE bool AnyLane(const I& mask) {
  uint64_t words[sizeof(I) / sizeof(uint64_t)];
  std::memcpy(words, &mask, sizeof(I));
  uint64_t any = 0;
  for (uint64_t word : words) any |= word;
  return any != 0;
}

// NaN -> -inf, +inf -> largest finite float.
template <typename V>
LOOM_SAMPLING_INLINE void SanitizeInPlace(V& x) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kMaxFinite = std::numeric_limits<float>::max();
  x = x == x ? x : V{} - kInf;
  x = x < kMaxFinite ? x : V{} + kMaxFinite;
}

// exp(x) for x <= 0 (including -inf), within ~2 ulp; 0 below -87 (where exp(x) < 2e-38, so no
// subnormal is ever produced), exactly 1 at 0. x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite,
// ln2 split so n * kLn2Hi is exact), exp(r) by the Cephes expf polynomial, times 2^n.
template <typename V>
LOOM_SAMPLING_INLINE void ExpNonPositiveInPlace(V& x) {
  using I = IntVec<V>;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const I underflow = x < -87.0f;
  const V clamped = underflow ? V{} - 87.0f : x;
  const V n = (clamped * kLog2e + kRoundMagic) - kRoundMagic;
  const V r = (clamped - n * kLn2Hi) - n * kLn2Lo;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const I exponent = (__builtin_convertvector(n, I) + 127) << 23;
  const V result = p * __builtin_bit_cast(V, exponent);
  x = __builtin_bit_cast(V, __builtin_bit_cast(I, result) & ~underflow);
}

// The same for one value (lane 0 of the 4-lane code, so they agree bit for bit).
inline float Sanitize(float x) {
  Vec4f v = Vec4f{} + x;
  SanitizeInPlace(v);
  return v[0];
}
inline float ExpNonPositive(float x) {
  Vec4f v = Vec4f{} + x;
  ExpNonPositiveInPlace(v);
  return v[0];
}

}  // namespace loom::sampling_internal
