// Decode attention item kernel compiled for AVX2 + FMA + F16C (8 lanes).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/attention_decode.h"
#include "kernels/cpu/simd_avx2.h"

namespace loom::cpu::avx2 {
namespace simd = ::loom::cpu::simd_avx2;
#include "kernels/cpu/attention_decode_impl.inc"
}  // namespace loom::cpu::avx2
