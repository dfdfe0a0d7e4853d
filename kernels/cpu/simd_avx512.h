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
inline Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec Sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec Max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
inline float ReduceAdd(Vec v) { return _mm512_reduce_add_ps(v); }
inline float ReduceMax(Vec v) { return _mm512_reduce_max_ps(v); }

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

}  // namespace loom::cpu::simd_avx512
