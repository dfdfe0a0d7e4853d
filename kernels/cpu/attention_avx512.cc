// Paged attention item kernel compiled for AVX-512 (16 lanes).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/simd_avx512.h"

namespace loom::cpu::avx512 {
namespace simd = ::loom::cpu::simd_avx512;
#include "kernels/cpu/attention_impl.inc"
}  // namespace loom::cpu::avx512
