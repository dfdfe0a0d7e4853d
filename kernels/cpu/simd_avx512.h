// 16-lane f32 vector helpers for AVX-512 translation units (files ending in _avx512.cc).
// Include only from those files: the intrinsics need the ISA flags CMake gives them (or the ISA
// emulation of x86_intrinsics.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/x86_intrinsics.h"

namespace loom::cpu::simd_avx512 {

constexpr int kLanes = 16;
using Vec = __m512;

inline Vec Zero() { return _mm512_setzero_ps(); }
inline Vec Set1(float x) { return _mm512_set1_ps(x); }
inline Vec Load(const float* p) { return _mm512_loadu_ps(p); }
inline void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec LoadBf16(const uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
inline Vec LoadF16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// OCP FP8 E4M3 bytes p[0..16) as f32, exact (the method of simd_avx2::LoadFp8).
inline Vec LoadFp8(const uint8_t* p) {
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i magnitude = _mm512_and_si512(bytes, _mm512_set1_epi32(0x7f));
  const Vec value = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(magnitude, 20)),
                                  _mm512_set1_ps(0x1p120f));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(bytes, _mm512_set1_epi32(0x80)), 24);
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(magnitude, _mm512_set1_epi32(0x7f));
  const __m512i bits = _mm512_mask_mov_epi32(
      _mm512_or_si512(_mm512_castps_si512(value), sign), nan, _mm512_set1_epi32(-1));
  return _mm512_castsi512_ps(bits);
}
// Bits [shift, shift + width) of each of the kLanes 32-bit lanes at p (unaligned), as f32
// (mask = 2^width - 1): one code of every lane of a low-bit KV tile (kernels/common/kv_format.h).
inline Vec LaneCodes(const uint8_t* p, int shift, int mask) {
  const __m512i x = _mm512_loadu_si512(p);
  return _mm512_cvtepi32_ps(
      _mm512_and_si512(_mm512_srl_epi32(x, _mm_cvtsi32_si128(shift)), _mm512_set1_epi32(mask)));
}
inline Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec Sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec Max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
inline Vec Abs(Vec v) { return _mm512_abs_ps(v); }
inline Vec Fnma(Vec a, Vec b, Vec c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
// Rounds x to the nearest integers, stores them saturated at dst (16 int8 / uint8 / int16) and
// returns the rounded values (not saturated) as f32. RoundToUint8: x >= 0.
inline Vec RoundToInt8(Vec x, uint8_t* dst) {
  const __m512i i = _mm512_cvtps_epi32(x);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtsepi32_epi8(i));
  return _mm512_cvtepi32_ps(i);
}
inline Vec RoundToUint8(Vec x, uint8_t* dst) {
  const __m512i i = _mm512_cvtps_epi32(x);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtusepi32_epi8(i));
  return _mm512_cvtepi32_ps(i);
}
inline Vec RoundToInt16(Vec x, uint8_t* dst) {
  const __m512i i = _mm512_cvtps_epi32(x);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtsepi32_epi16(i));
  return _mm512_cvtepi32_ps(i);
}
inline float ReduceAdd(Vec v) { return _mm512_reduce_add_ps(v); }
inline float ReduceMax(Vec v) { return _mm512_reduce_max_ps(v); }
// v where base + lane lies in [lo, hi], else `outside`.
inline Vec KeepRange(Vec v, int32_t base, int32_t lo, int32_t hi, float outside) {
  const __m512i index =
      _mm512_add_epi32(_mm512_set1_epi32(base),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __mmask16 inside = _mm512_cmpge_epi32_mask(index, _mm512_set1_epi32(lo)) &
                           _mm512_cmple_epi32_mask(index, _mm512_set1_epi32(hi));
  return _mm512_mask_mov_ps(_mm512_set1_ps(outside), inside, v);
}

// e^x, the same method and accuracy as simd_avx2::Exp (relative error below 2e-7).
inline Vec Exp(Vec x) {
  const Vec max_x = Set1(88.7228391f);
  const Vec min_x = Set1(-87.3365448f);
  const Vec clamped = _mm512_min_ps(_mm512_max_ps(x, min_x), max_x);
  const Vec n = _mm512_roundscale_ps(Mul(clamped, Set1(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  Vec r = Fma(n, Set1(-0.693359375f), clamped);
  r = Fma(n, Set1(2.12194440e-4f), r);
  Vec p = Set1(1.9875691500e-4f);
  p = Fma(p, r, Set1(1.3981999507e-3f));
  p = Fma(p, r, Set1(8.3334519073e-3f));
  p = Fma(p, r, Set1(4.1665795894e-2f));
  p = Fma(p, r, Set1(1.6666665459e-1f));
  p = Fma(p, r, Set1(5.0000001201e-1f));
  p = Fma(p, Mul(r, r), Add(r, Set1(1.0f)));
  Vec result = _mm512_scalef_ps(p, n);
  result = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, min_x, _CMP_LT_OQ), result, Zero());
  result = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, max_x, _CMP_GT_OQ), result,
                                Set1(__builtin_inff()));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), result, x);
}

// e^x for x <= 0 (-inf gives 0, NaN stays NaN), relative error below 3e-6: a degree-5 polynomial
// after one-constant range reduction, for softmax weights that are rounded to integers after.
inline Vec ExpNonPositive(Vec x) {
  const Vec xc = _mm512_max_ps(Set1(-87.0f), x);  // NaN: the second operand, x
  const Vec n = _mm512_roundscale_ps(Mul(xc, Set1(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const Vec r = Fma(n, Set1(-0.693147180559945309f), xc);
  Vec p = Fma(Set1(1.0f / 120), r, Set1(1.0f / 24));
  p = Fma(p, r, Set1(1.0f / 6));
  p = Fma(p, r, Set1(0.5f));
  p = Fma(p, r, Set1(1.0f));
  p = Fma(p, r, Set1(1.0f));
  // Below -87 (-inf included) the result is 0; NaN passes.
  return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, Set1(-87.0f), _CMP_NLT_UQ), p, n);
}

}  // namespace loom::cpu::simd_avx512
