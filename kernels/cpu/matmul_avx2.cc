// AVX2 + FMA + F16C matmul: the kernels of matmul_dot_inl.h (GEMV) and matmul_panel_inl.h (GEMM)
// on 8-lane ymm vectors.
//
// Tiles (16 ymm registers): GEMV keeps m * kNr accumulators with kNr = 4 for m <= 3 and 3 for
// m >= 4 (that many concurrent weight-row streams per thread);
// GEMM keeps 6 weight rows × 16 tokens (12 accumulators + 2 x vectors + 1 broadcast).
// bf16 widens by vpmovzxwd + vpslld 16, f16 by vcvtph2ps; tails (k % 8) load through a masked
// load (f32) or a zero-padded copy (16-bit types), never past the row.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_dot_inl.h"
#include "kernels/cpu/matmul_panel_inl.h"
#include "kernels/cpu/matmul_int8_inl.h"
#include "kernels/cpu/matmul_quant_inl.h"

namespace loom::cpu::matmul_internal {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;

  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float v) { return _mm256_set1_ps(v); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V LoadX(const float* p) { return _mm256_loadu_ps(p); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
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
      const __m256i wide =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
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
  static void PrefetchL2(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }

  // Block-quantized weights (matmul_quant_inl.h): 32 signed bytes to four f32 vectors.
  static void WidenBytes(__m256i bytes, V (&out)[4]) {
    const __m128i lo = _mm256_castsi256_si128(bytes);
    const __m128i hi = _mm256_extracti128_si256(bytes, 1);
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo)));
    out[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
    out[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi)));
  }
  // Group g of a quantized block as four f32 vectors of q. The nibble formats and q8_0 widen
  // straight from memory (vpmovzxbd / vpmovsxbd with a memory operand: 8 bytes per load, no
  // cross-lane shuffle); q5_k and q6_k go through their 32-byte form.
  static __m256i Bytes8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  template <class F>
  static void DecodeGroup(const uint8_t* block, int g, V (&out)[4]) {
    const __m256i low4 = _mm256_set1_epi32(15);
    if constexpr (std::is_same_v<F, Q8_0Format>) {
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        out[v] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + 8 * v))));
      }
    } else if constexpr (std::is_same_v<F, Q4_0Format> || std::is_same_v<F, Q4_1Format>) {
      // Byte l of qs holds element l (low nibble) and l + 16 (high nibble).
      const uint8_t* qs = block + (std::is_same_v<F, Q4_0Format> ? 2 : 4);
      const __m256i a = Bytes8(qs), b = Bytes8(qs + 8);
      out[0] = _mm256_cvtepi32_ps(_mm256_and_si256(a, low4));
      out[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b, low4));
      out[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(a, 4));
      out[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
    } else if constexpr (std::is_same_v<F, Q4_KFormat>) {
      // Group 2c takes the low nibbles of qs[32c ..], group 2c + 1 the high ones.
      const uint8_t* qs = block + 16 + 32 * (g / 2);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m256i bytes = Bytes8(qs + 8 * v);
        out[v] = _mm256_cvtepi32_ps((g & 1) ? _mm256_srli_epi32(bytes, 4)
                                            : _mm256_and_si256(bytes, low4));
      }
    } else {
      WidenBytes(F::Group(block, g), out);
    }
  }
  // GEMV tiles of quantized weights: weight rows per tile for m = 1, m = 2 and larger m (in
  // chunks of kQuantMrMax x rows).
  static constexpr int kQuantRowsM1 = 4;
  static constexpr bool kQuantFactoredM1 = true;  // m = 1 through QuantDotRowFactored
  static constexpr int kQuantRowsM2 = 4;
  static constexpr int kQuantRowsMany = 2;
  static constexpr int kQuantMrMax = 4;
  static void QuantRows(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin,
                        int64_t row_end) {
    QuantGemvRows<Avx2>(x, p, row_begin, row_end);
  }
};

// GEMV: kNr = 4 runs of weight rows walked side by side (3 for m >= 4, to stay within 12
// accumulators). Measured over a 1 GiB sweep on the AMD EPYC (Zen 3) development machine
// (bench/results/cpu_matmul.md): 6 or 8 runs were no better, and prefetching ahead into L1 lost
// bandwidth with adjacent rows and was within the noise with the run order, so m = 1 prefetches
// nothing. From m = 2 on, GemvLayout::kZen4 (AMD) prefetches each run 2 KiB ahead into L2
// (DotTile's sign convention): this code on a Zen 4 core, one thread, read 25-49 % faster at
// m = 2-8 that way (bench/results/cpu_matmul.md, "GEMV streams per CPU"; not yet measured on
// Zen 3). kSapphireRapids keeps no prefetch.
constexpr int kGemvPrefetchBytes = 0;
constexpr int kZen4PrefetchBytes = -2048;

// GEMM (matmul_panel_inl.h): 6 weight rows per tile; tokens, k and weight rows per block, sized
// for a 32 KiB L1 (a 16-token panel of kc: 16 KiB) and a 512 KiB L2 (block + accumulator +
// x^T of mc tokens: 224 KiB).
constexpr int kGemmRows = 6;
constexpr PanelBlocking kGemmBlocking = {128, 256, 96};
constexpr int64_t kGemmPanel = 2 * Avx2::kLanes;  // tokens per x^T panel
static_assert(kGemmBlocking.kc % 256 == 0, "k blocks must hold whole quantization blocks");

}  // namespace

void GemvAvx2(const GroupArgs& args, ThreadPool& pool) {
  const bool int8 = UseInt8Gemv(args);
  // The f32 GEMV, or the int8 one (x quantized once; float weights of the group on the f32 path).
  auto run = [&]<int kMr, int kNr>() {
    if (int8) {
      RunInt8GemvGroup<Avx2, kMr, kNr, kGemvPrefetchBytes>(args, pool);
    } else if (args.gemv_layout == GemvLayout::kZen4) {
      constexpr int kPrefetch = kMr == 1 ? kGemvPrefetchBytes : kZen4PrefetchBytes;
      RunGemvGroup<Avx2, kMr, kNr, kPrefetch>(args, pool);
    } else {
      RunGemvGroup<Avx2, kMr, kNr, kGemvPrefetchBytes>(args, pool);
    }
  };
  switch (args.x.m) {
    case 1:
      run.template operator()<1, 4>();
      break;
    case 2:
      run.template operator()<2, 4>();
      break;
    case 3:
      run.template operator()<3, 4>();
      break;
    default:
      run.template operator()<4, 3>();
      break;
  }
}

void GemmAvx2(const GroupArgs& args, ThreadPool& pool) {
  RunPanelGroup<Avx2, kGemmRows>(args, pool, kGemmBlocking);
}

size_t GemmAvx2WorkspaceBytes(int64_t m, int64_t k, int num_threads) {
  return PanelWorkspaceBytes(m, k, num_threads, kGemmPanel, kGemmBlocking);
}

}  // namespace loom::cpu::matmul_internal
