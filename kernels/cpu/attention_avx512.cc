// Paged attention item kernel compiled for AVX-512 (16 lanes).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention.h"

// gcc 12 reports the _mm256_undefined_* placeholders inside its own _mm512_reduce_max_ps as
// uninitialized once inlined here (the flag set already silences the "maybe" form).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "kernels/cpu/simd_avx512.h"

namespace loom::cpu::avx512 {
namespace simd = ::loom::cpu::simd_avx512;
#include "kernels/cpu/attention_impl.inc"
}  // namespace loom::cpu::avx512
