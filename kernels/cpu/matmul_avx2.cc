// AVX2 + FMA + F16C matmul: the FMA kernel of matmul_fma_inl.h on 8-lane ymm vectors.
//
// Tiles (16 ymm registers): GEMV keeps m * kNr accumulators with kNr = 8, 6, 4, 3 for
// m = 1, 2, 3, >= 4 (8 to 12 concurrent weight-row streams per thread, prefetched 1 KiB ahead);
// GEMM uses 3 x rows by 4 weight rows (12 accumulators + 3 x vectors + 1 weight vector).
// bf16 widens by vpmovzxwd + vpslld 16, f16 by vcvtph2ps; tails (k % 8) load through a masked
// load (f32) or a zero-padded copy (16-bit types), never past the row.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_fma_inl.h"

namespace loom::cpu::matmul_internal {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;

  static V Zero() { return _mm256_setzero_ps(); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V LoadX(const float* p) { return _mm256_loadu_ps(p); }
  static __m256i LaneMask(int count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V LoadXPartial(const float* p, int count) {
    return _mm256_maskload_ps(p, LaneMask(count));
  }

  template <class W>
  static V LoadW(const typename W::Storage* p) {
    if constexpr (std::is_same_v<W, F32Weight>) {
      return _mm256_loadu_ps(p);
    } else if constexpr (std::is_same_v<W, F16Weight>) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else {
      const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    }
  }
  template <class W>
  static V LoadWPartial(const typename W::Storage* p, int count) {
    if constexpr (std::is_same_v<W, F32Weight>) {
      return _mm256_maskload_ps(p, LaneMask(count));
    } else {
      alignas(16) uint16_t padded[kLanes] = {};
      std::memcpy(padded, p, static_cast<size_t>(count) * sizeof(uint16_t));
      return LoadW<W>(padded);
    }
  }

  static float ReduceAdd(V v) {
    __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
    return _mm_cvtss_f32(sum);
  }
  static void Prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
};

// GEMM: x rows per block, k per block, weight rows per block (see matmul_fma_inl.h).
constexpr FmaBlocking kGemmBlocking = {48, 512, 64};

}  // namespace

void GemvAvx2(const GroupArgs& args, ThreadPool& pool) {
  switch (args.x.m) {
    case 1: RunGroup<Avx2, 1, 8, true>(args, pool, GemvBlocking(args.x, 8)); break;
    case 2: RunGroup<Avx2, 2, 6, true>(args, pool, GemvBlocking(args.x, 6)); break;
    case 3: RunGroup<Avx2, 3, 4, true>(args, pool, GemvBlocking(args.x, 4)); break;
    default: RunGroup<Avx2, 4, 3, true>(args, pool, GemvBlocking(args.x, 3)); break;
  }
}

void GemmAvx2(const GroupArgs& args, ThreadPool& pool) {
  RunGroup<Avx2, 3, 4, false>(args, pool, kGemmBlocking);
}

}  // namespace loom::cpu::matmul_internal
