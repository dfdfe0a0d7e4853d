// 8-lane f32 vector helpers for AVX2 + FMA + F16C translation units (files ending in _avx2.cc).
// Include only from those files: the intrinsics need the ISA flags CMake gives them.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace loom::cpu::simd_avx2 {

constexpr int kLanes = 8;
using Vec = __m256;

inline Vec Zero() { return _mm256_setzero_ps(); }
inline Vec Set1(float x) { return _mm256_set1_ps(x); }
inline Vec Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec LoadBf16(const uint16_t* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}
inline Vec LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// OCP FP8 E4M3 bytes p[0..8) as f32, exact: the 7 magnitude bits placed under the f32 exponent
// field and scaled by 2^120 (which also makes the subnormals exact); 0x7f/0xff give NaN.
inline Vec LoadFp8(const uint8_t* p) {
  const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i magnitude = _mm256_and_si256(bytes, _mm256_set1_epi32(0x7f));
  Vec value = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(magnitude, 20)),
                            _mm256_set1_ps(0x1p120f));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(bytes, _mm256_set1_epi32(0x80)), 24);
  const __m256i nan = _mm256_cmpeq_epi32(magnitude, _mm256_set1_epi32(0x7f));
  return _mm256_or_ps(value, _mm256_castsi256_ps(_mm256_or_si256(sign, nan)));
}
// Bits [shift, shift + width) of each of the kLanes 32-bit lanes at p (unaligned), as f32
// (mask = 2^width - 1): one code of every lane of a low-bit KV tile (kernels/common/kv_format.h).
inline Vec LaneCodes(const uint8_t* p, int shift, int mask) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_cvtepi32_ps(
      _mm256_and_si256(_mm256_srl_epi32(x, _mm_cvtsi32_si128(shift)), _mm256_set1_epi32(mask)));
}
inline Vec Add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec Sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec Max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c
inline Vec Abs(Vec v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
inline Vec Fnma(Vec a, Vec b, Vec c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a * b
// Rounds x to the nearest integers, stores them saturated at dst (8 int8 / uint8 / int16) and
// returns the rounded values (not saturated) as f32. RoundToUint8: x >= 0.
inline Vec RoundToInt8(Vec x, uint8_t* dst) {
  const __m256i i = _mm256_cvtps_epi32(x);
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packs_epi16(w, w));
  return _mm256_cvtepi32_ps(i);
}
inline Vec RoundToUint8(Vec x, uint8_t* dst) {
  const __m256i i = _mm256_cvtps_epi32(x);
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(w, w));
  return _mm256_cvtepi32_ps(i);
}
inline Vec RoundToInt16(Vec x, uint8_t* dst) {
  const __m256i i = _mm256_cvtps_epi32(x);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                   _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
  return _mm256_cvtepi32_ps(i);
}
inline float ReduceAdd(Vec v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
inline float ReduceMax(Vec v) {
  __m128 lo = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
// v where base + lane lies in [lo, hi], else `outside`.
inline Vec KeepRange(Vec v, int32_t base, int32_t lo, int32_t hi, float outside) {
  const __m256i index =
      _mm256_add_epi32(_mm256_set1_epi32(base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i outside_mask =
      _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), index),
                      _mm256_cmpgt_epi32(index, _mm256_set1_epi32(hi)));
  return _mm256_blendv_ps(v, _mm256_set1_ps(outside), _mm256_castsi256_ps(outside_mask));
}

// e^x for f32 lanes: range reduction x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial for
// e^r, then scaling by 2^n. Relative error below 2e-7 over the normal range; inputs below
// about -87.3 give 0 and above 88.7 give +inf, NaN stays NaN.
inline Vec Exp(Vec x) {
  const Vec max_x = Set1(88.7228391f);
  const Vec min_x = Set1(-87.3365448f);
  const Vec clamped = _mm256_min_ps(_mm256_max_ps(x, min_x), max_x);
  const Vec n = _mm256_round_ps(Mul(clamped, Set1(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n * ln2, with ln2 split in two for precision.
  Vec r = Fma(n, Set1(-0.693359375f), clamped);
  r = Fma(n, Set1(2.12194440e-4f), r);
  Vec p = Set1(1.9875691500e-4f);
  p = Fma(p, r, Set1(1.3981999507e-3f));
  p = Fma(p, r, Set1(8.3334519073e-3f));
  p = Fma(p, r, Set1(4.1665795894e-2f));
  p = Fma(p, r, Set1(1.6666665459e-1f));
  p = Fma(p, r, Set1(5.0000001201e-1f));
  p = Fma(p, Mul(r, r), Add(r, Set1(1.0f)));
  const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                              _mm256_set1_epi32(127)), 23);
  Vec result = Mul(p, _mm256_castsi256_ps(exponent));
  // Saturate: below the range gives 0, above gives inf; NaN propagates.
  result = _mm256_blendv_ps(result, Zero(), _mm256_cmp_ps(x, min_x, _CMP_LT_OQ));
  result = _mm256_blendv_ps(result, Set1(__builtin_inff()), _mm256_cmp_ps(x, max_x, _CMP_GT_OQ));
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// e^x for x <= 0 (-inf gives 0, NaN stays NaN), relative error below 3e-6: a degree-5 polynomial
// after one-constant range reduction, for softmax weights that are rounded to integers after.
inline Vec ExpNonPositive(Vec x) {
  const Vec xc = _mm256_max_ps(Set1(-87.0f), x);  // NaN: the second operand, x
  const Vec n = _mm256_round_ps(Mul(xc, Set1(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const Vec r = Fma(n, Set1(-0.693147180559945309f), xc);
  Vec p = Fma(Set1(1.0f / 120), r, Set1(1.0f / 24));
  p = Fma(p, r, Set1(1.0f / 6));
  p = Fma(p, r, Set1(0.5f));
  p = Fma(p, r, Set1(1.0f));
  p = Fma(p, r, Set1(1.0f));
  // 2^n (n in [-126, 0]) through the exponent field. Below -87 (-inf included) the result is 0;
  // NaN passes.
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const Vec keep = _mm256_cmp_ps(x, Set1(-87.0f), _CMP_NLT_UQ);
  return _mm256_and_ps(Mul(p, _mm256_castsi256_ps(e)), keep);
}

}  // namespace loom::cpu::simd_avx2
