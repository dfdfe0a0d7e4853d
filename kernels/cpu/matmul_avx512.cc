// AVX-512 matmul: the FMA kernel of matmul_fma_inl.h on 16-lane zmm vectors.
//
// Tiles (32 zmm registers): GEMV keeps m * kNr accumulators with kNr = 8 for m <= 3 and 6 for
// m >= 4 (6 to 8 concurrent weight-row streams per thread, prefetched 1 KiB ahead); GEMM uses
// 4 x rows by 6 weight rows (24 accumulators + 4 x vectors + 1 weight vector). bf16 widens by
// vpmovzxwd + vpslld 16, f16 by vcvtph2ps; k tails use fault-free masked loads, never read past a
// row. GemmRowsAvx512 also serves the AMX path for f16/f32 weights and for weight rows past the
// last full tile.
#include <immintrin.h>

// gcc 12's AVX-512 headers build some results from a deliberately uninitialised register and then
// warn about it once inlined (a false positive in the headers, not in this file).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>

#include "kernels/cpu/matmul_fma_inl.h"

namespace loom::cpu::matmul_internal {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;

  static V Zero() { return _mm512_setzero_ps(); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V LoadX(const float* p) { return _mm512_loadu_ps(p); }
  static __mmask16 LaneMask(int count) { return static_cast<__mmask16>((1u << count) - 1u); }
  static V LoadXPartial(const float* p, int count) {
    return _mm512_maskz_loadu_ps(LaneMask(count), p);
  }

  static V Widen(__m256i halves, bool bf16) {
    if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
    return _mm512_cvtph_ps(halves);
  }
  template <class W>
  static V LoadW(const typename W::Storage* p) {
    if constexpr (std::is_same_v<W, F32Weight>) {
      return _mm512_loadu_ps(p);
    } else {
      const __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      return Widen(halves, std::is_same_v<W, Bf16Weight>);
    }
  }
  template <class W>
  static V LoadWPartial(const typename W::Storage* p, int count) {
    if constexpr (std::is_same_v<W, F32Weight>) {
      return _mm512_maskz_loadu_ps(LaneMask(count), p);
    } else {
      const __m256i halves = _mm256_maskz_loadu_epi16(LaneMask(count), p);
      return Widen(halves, std::is_same_v<W, Bf16Weight>);
    }
  }

  static float ReduceAdd(V v) { return _mm512_reduce_add_ps(v); }
  static void Prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
};

// GEMM: x rows per block, k per block, weight rows per block (see matmul_fma_inl.h). Sized for a
// 48 KiB L1 and a 2 MiB L2: 4 x rows and 6 weight rows of kc in L1, nc weight rows and mc x rows
// of kc in L2.
constexpr FmaBlocking kGemmBlocking = {64, 512, 96};

}  // namespace

void GemvAvx512(const GroupArgs& args, ThreadPool& pool) {
  switch (args.x.m) {
    case 1: RunGroup<Avx512, 1, 8, true>(args, pool, GemvBlocking(args.x, 8)); break;
    case 2: RunGroup<Avx512, 2, 8, true>(args, pool, GemvBlocking(args.x, 8)); break;
    case 3: RunGroup<Avx512, 3, 8, true>(args, pool, GemvBlocking(args.x, 8)); break;
    default: RunGroup<Avx512, 4, 6, true>(args, pool, GemvBlocking(args.x, 6)); break;
  }
}

void GemmAvx512(const GroupArgs& args, ThreadPool& pool) {
  RunGroup<Avx512, 4, 6, false>(args, pool, kGemmBlocking);
}

void GemmRowsAvx512(const MatmulInput& x, const MatmulProjection& projection, int64_t row_begin,
                    int64_t row_end) {
  RunProjectionRows<Avx512, 4, 6, false>(x, projection, row_begin, row_end, kGemmBlocking);
}

}  // namespace loom::cpu::matmul_internal
