// AVX-512 intrinsics for the ISA-emulation build: SIMDe's portable AVX-512 plus the intrinsics
// loom's kernels use that SIMDe 0.7.4 does not provide. Included only through
// kernels/cpu/x86_intrinsics.h, and only when LOOM_ISA_EMULATION is defined (the
// loom_kernels_cpu_emulated library, which only the emulated kernel tests link).
//
// How the emulation works: SIMDE_ENABLE_NATIVE_ALIASES makes SIMDe define every AVX-512 intrinsic
// it implements as a macro on its own function (`_mm512_add_ps(a, b)` -> `simde_mm512_add_ps(a,
// b)`), and `__m512`, `__m512i`, `__mmask16` name the compiler's own 64-byte vector types. The
// _avx512.cc and _amx.cc files are compiled with AVX2 flags only, so any AVX-512 intrinsic that
// neither SIMDe nor this file defines still resolves to the compiler's inline function and the
// build fails ("inlining failed in call to 'always_inline' ... target specific option
// mismatch"): nothing can run natively by accident. Such an intrinsic is added here.
//
// The additions below are written plainly, lane by lane, on SIMDe's private representations
// (`simde__m512_private` and friends: unions of arrays of every lane type), following the
// instruction's documented operation:
//   _mm512_cvtph_ps          16 IEEE halves -> f32 (exact; a signalling NaN comes back quiet)
//   _mm512_cvtepu16_epi32    16 u16 -> u32, zero-extended
//   _mm512_cvtepi8_epi32     16 i8 -> i32, sign-extended
//   _mm512_cvtepu8_epi32     16 u8 -> u32, zero-extended
//   _mm512_cvtepu8_epi16     32 u8 -> u16, zero-extended
//   _mm512_cvtepi32_ps       16 i32 -> f32, rounded to nearest even (exact below 2^24)
//   _mm512_cvtps_epi32       16 f32 -> i32, rounded to nearest even (MXCSR's default); NaN and
//                            out-of-range lanes give the "integer indefinite" 0x80000000
//   _mm512_cvtusepi32_epi8   16 u32 -> u8, saturated to 255
//   _mm512_maskz_loadu_ps    16 f32 lanes, disabled lanes zero and not read
//   _mm256_maskz_loadu_epi16 16 u16 lanes, disabled lanes zero and not read
//   _mm512_reduce_add_ps     sum of 16 lanes, in the order of gcc's own definition
//   _mm512_reduce_max_ps     max of 16 lanes, in the order of gcc's own definition
//   _mm512_shuffle_i64x2     128-bit blocks: two of a (imm bits 0-3), two of b (bits 4-7)
// Masked loads read only the enabled lanes, as the instruction's fault suppression guarantees,
// so AddressSanitizer (cpu-debug preset) reports a kernel whose mask reaches past its buffer.
// The reductions pair lanes exactly as gcc's <avx512fintrin.h> does (256-bit halves, 128-bit
// halves, lanes 2 apart, lanes 1 apart), so they round as the real build does.
//
// AVX512-VNNI (_mm256_dpbusd_epi32, _mm256_dpwssd_epi32: the decode attention's integer dots) is
// in SIMDe's dpbusd.h and dpwssd.h; AVX512-BF16's _mm512_dpbf16_ps (the bf16 GEMM and GEMV of
// matmul_bf16dot_avx512.cc, which round to bf16 in scalar code) in its dpbf16.h.
// _mm512_cvtne2ps_pbh is not in SIMDe 0.7.4 and would have to be added here before a kernel uses
// it.
#pragma once

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/dtype.h"

namespace loom::cpu::isa_emulation {

// vcvtph2ps zmm, ymm.
inline simde__m512 Mm512CvtphPs(simde__m256i a) {
  const simde__m256i_private halves = simde__m256i_to_private(a);
  simde__m512_private r;
  for (int i = 0; i < 16; ++i) {
    const uint16_t h = halves.u16[i];
    float f = Fp16ToF32(h);
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0) {  // NaN: set the quiet bit
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof(bits));
      bits |= 0x00400000u;
      std::memcpy(&f, &bits, sizeof(f));
    }
    r.f32[i] = f;
  }
  return simde__m512_from_private(r);
}

// vpmovzxwd zmm, ymm.
inline simde__m512i Mm512Cvtepu16Epi32(simde__m256i a) {
  const simde__m256i_private words = simde__m256i_to_private(a);
  simde__m512i_private r;
  for (int i = 0; i < 16; ++i) r.u32[i] = words.u16[i];
  return simde__m512i_from_private(r);
}

// vpmovsxbd zmm, xmm.
inline simde__m512i Mm512Cvtepi8Epi32(simde__m128i a) {
  const simde__m128i_private bytes = simde__m128i_to_private(a);
  simde__m512i_private r;
  for (int i = 0; i < 16; ++i) r.i32[i] = bytes.i8[i];
  return simde__m512i_from_private(r);
}

// vpmovzxbd zmm, xmm.
inline simde__m512i Mm512Cvtepu8Epi32(simde__m128i a) {
  const simde__m128i_private bytes = simde__m128i_to_private(a);
  simde__m512i_private r;
  for (int i = 0; i < 16; ++i) r.i32[i] = bytes.u8[i];
  return simde__m512i_from_private(r);
}

// vpmovzxbw zmm, ymm.
inline simde__m512i Mm512Cvtepu8Epi16(simde__m256i a) {
  const simde__m256i_private bytes = simde__m256i_to_private(a);
  simde__m512i_private r;
  for (int i = 0; i < 32; ++i) r.u16[i] = bytes.u8[i];
  return simde__m512i_from_private(r);
}

// vcvtdq2ps zmm, zmm (the default rounding, nearest even, is the C++ conversion's).
inline simde__m512 Mm512Cvtepi32Ps(simde__m512i a) {
  const simde__m512i_private ints = simde__m512i_to_private(a);
  simde__m512_private r;
  for (int i = 0; i < 16; ++i) r.f32[i] = static_cast<float>(ints.i32[i]);
  return simde__m512_from_private(r);
}

// vcvtps2dq zmm, zmm.
inline simde__m512i Mm512CvtpsEpi32(simde__m512 a) {
  const simde__m512_private floats = simde__m512_to_private(a);
  simde__m512i_private r;
  for (int i = 0; i < 16; ++i) {
    const float x = std::nearbyint(floats.f32[i]);
    r.i32[i] = x >= -2147483648.0f && x < 2147483648.0f ? static_cast<int32_t>(x) : INT32_MIN;
  }
  return simde__m512i_from_private(r);
}

// vpmovusdb xmm, zmm: each lane read as unsigned, saturated to 255.
inline simde__m128i Mm512Cvtusepi32Epi8(simde__m512i a) {
  const simde__m512i_private ints = simde__m512i_to_private(a);
  simde__m128i_private r;
  for (int i = 0; i < 16; ++i) {
    r.u8[i] = static_cast<uint8_t>(ints.u32[i] > 255u ? 255u : ints.u32[i]);
  }
  return simde__m128i_from_private(r);
}

// vmovups zmm{k}{z}, [mem].
inline simde__m512 Mm512MaskzLoaduPs(simde__mmask16 mask, const void* mem) {
  simde__m512_private r;
  for (int i = 0; i < 16; ++i) {
    r.f32[i] = 0.0f;
    if ((mask >> i) & 1u) std::memcpy(&r.f32[i], static_cast<const char*>(mem) + 4 * i, 4);
  }
  return simde__m512_from_private(r);
}

// vmovdqu16 ymm{k}{z}, [mem].
inline simde__m256i Mm256MaskzLoaduEpi16(simde__mmask16 mask, const void* mem) {
  simde__m256i_private r;
  for (int i = 0; i < 16; ++i) {
    uint16_t lane = 0;
    if ((mask >> i) & 1u) std::memcpy(&lane, static_cast<const char*>(mem) + 2 * i, 2);
    r.u16[i] = lane;
  }
  return simde__m256i_from_private(r);
}

// The pairing of gcc's __MM512_REDUCE_OP: 16 -> 8 lanes (i with i + 8) and 8 -> 4 (i with i + 4)
// as op(upper half, lower half); 4 -> 2 (i with i + 2) and 2 -> 1 (0 with 1) as op(lower, upper).
// The operand order matters only for vmaxps's NaN and signed-zero rule.
template <typename Op>
inline float ReduceLikeGcc(simde__m512 a, Op op) {
  const simde__m512_private v = simde__m512_to_private(a);
  float t[16];
  for (int i = 0; i < 16; ++i) t[i] = v.f32[i];
  for (int width = 8; width >= 4; width /= 2) {
    for (int i = 0; i < width; ++i) t[i] = op(t[i + width], t[i]);
  }
  for (int width = 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) t[i] = op(t[i], t[i + width]);
  }
  return t[0];
}

inline float Mm512ReduceAddPs(simde__m512 a) {
  return ReduceLikeGcc(a, [](float x, float y) { return x + y; });
}

// vmaxps semantics: the second operand when either is NaN or both are zero.
inline float Mm512ReduceMaxPs(simde__m512 a) {
  return ReduceLikeGcc(a, [](float x, float y) { return x > y ? x : y; });
}

// vshufi64x2 zmm, zmm, zmm, imm8: block j of the result is block (imm >> 2j) & 3 of a (j < 2)
// or of b (j >= 2).
inline simde__m512i Mm512ShuffleI64x2(simde__m512i a, simde__m512i b, int imm) {
  const simde__m512i_private x = simde__m512i_to_private(a);
  const simde__m512i_private y = simde__m512i_to_private(b);
  simde__m512i_private r;
  for (int j = 0; j < 4; ++j) {
    const int block = (imm >> (2 * j)) & 3;
    const simde__m512i_private& src = j < 2 ? x : y;
    r.i64[2 * j] = src.i64[2 * block];
    r.i64[2 * j + 1] = src.i64[2 * block + 1];
  }
  return simde__m512i_from_private(r);
}

}  // namespace loom::cpu::isa_emulation

// The native names, in the style of SIMDe's own aliases. #undef first: a later SIMDe that has
// one of these would otherwise clash; ours stay in use so results do not depend on its version.
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps(a) ::loom::cpu::isa_emulation::Mm512CvtphPs(a)
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32(a) ::loom::cpu::isa_emulation::Mm512Cvtepu16Epi32(a)
#undef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32(a) ::loom::cpu::isa_emulation::Mm512Cvtepi8Epi32(a)
#undef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32(a) ::loom::cpu::isa_emulation::Mm512Cvtepu8Epi32(a)
#undef _mm512_cvtepu8_epi16
#define _mm512_cvtepu8_epi16(a) ::loom::cpu::isa_emulation::Mm512Cvtepu8Epi16(a)
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(a) ::loom::cpu::isa_emulation::Mm512Cvtepi32Ps(a)
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32(a) ::loom::cpu::isa_emulation::Mm512CvtpsEpi32(a)
#undef _mm512_cvtusepi32_epi8
#define _mm512_cvtusepi32_epi8(a) ::loom::cpu::isa_emulation::Mm512Cvtusepi32Epi8(a)
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, mem) ::loom::cpu::isa_emulation::Mm512MaskzLoaduPs(k, mem)
#undef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16(k, mem) ::loom::cpu::isa_emulation::Mm256MaskzLoaduEpi16(k, mem)
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps(a) ::loom::cpu::isa_emulation::Mm512ReduceAddPs(a)
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps(a) ::loom::cpu::isa_emulation::Mm512ReduceMaxPs(a)
#undef _mm512_shuffle_i64x2
#define _mm512_shuffle_i64x2(a, b, imm) ::loom::cpu::isa_emulation::Mm512ShuffleI64x2(a, b, imm)
