// Decode attention item kernel compiled for AVX-512 (16 lanes; the integer dot products of
// packed blocks use 256-bit vectors as in the AVX2 build, with the AVX512-VNNI dot products).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/attention_decode.h"

// gcc 12 reports the _mm256_undefined_* placeholders inside its own _mm512_reduce_add_ps as
// uninitialized once inlined here (the flag set already silences the "maybe" form).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "kernels/cpu/simd_avx512.h"

namespace loom::cpu::avx512 {
namespace simd = ::loom::cpu::simd_avx512;
#define LOOM_DECODE_AVX512 1
#include "kernels/cpu/attention_decode_impl.inc"
#undef LOOM_DECODE_AVX512
}  // namespace loom::cpu::avx512
