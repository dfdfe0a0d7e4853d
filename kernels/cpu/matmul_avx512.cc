// AVX-512 matmul: the kernels of matmul_dot_inl.h (GEMV) and matmul_panel_inl.h (GEMM) on 16-lane
// zmm vectors.
//
// Tiles (32 zmm registers): GEMV keeps m * kNr accumulators with kNr = 6, or 8 for m <= 3 in the
// Sapphire Rapids layout (that many concurrent weight-row streams per thread; GemvLayout); GEMM
// keeps 12 weight rows × 32 tokens (24 accumulators + 2 x vectors + broadcasts). bf16 widens by
// vpmovzxwd + vpslld 16, f16 by vcvtph2ps; k tails use fault-free masked loads, never read past a
// row. GemmRowsAvx512 (the dot kernel, 4 x rows × 6 weight rows, no workspace) serves the AMX path
// for the weight rows past its last full tile.
#include "kernels/cpu/x86_intrinsics.h"

// gcc 12's AVX-512 headers build some results from a deliberately uninitialised register and then
// warn about it once inlined (a false positive in the headers, not in this file).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>

#include "kernels/cpu/matmul_dot_inl.h"
#include "kernels/cpu/matmul_panel_inl.h"
#include "kernels/cpu/matmul_int8_inl.h"
#include "kernels/cpu/matmul_quant_inl.h"

namespace loom::cpu::matmul_internal {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;

  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float v) { return _mm512_set1_ps(v); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V LoadX(const float* p) { return _mm512_loadu_ps(p); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
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
  static void PrefetchL2(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }

  // Block-quantized weights (matmul_quant_inl.h): 32 signed bytes to two f32 vectors.
  static void WidenBytes(__m256i bytes, V (&out)[2]) {
    out[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(bytes)));
    out[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(bytes, 1)));
  }
  // Group g of a quantized block as two f32 vectors of q. As on AVX2, the nibble formats and
  // q8_0 widen straight from memory (vpmovzxbd / vpmovsxbd with a 16-byte memory operand: no
  // nibble split in bytes, no cross-lane shuffle); q5_k and q6_k go through their 32-byte form.
  static __m512i Bytes16(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  template <class F>
  static void DecodeGroup(const uint8_t* block, int g, V (&out)[2]) {
    const __m512i low4 = _mm512_set1_epi32(15);
    if constexpr (std::is_same_v<F, Q8_0Format>) {
      out[0] = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2))));
      out[1] = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 18))));
    } else if constexpr (std::is_same_v<F, Q4_0Format> || std::is_same_v<F, Q4_1Format>) {
      // Byte l of qs holds element l (low nibble) and l + 16 (high nibble).
      const __m512i a = Bytes16(block + (std::is_same_v<F, Q4_0Format> ? 2 : 4));
      out[0] = _mm512_cvtepi32_ps(_mm512_and_si512(a, low4));
      out[1] = _mm512_cvtepi32_ps(_mm512_srli_epi32(a, 4));
    } else if constexpr (std::is_same_v<F, Q4_KFormat>) {
      // Group 2c takes the low nibbles of qs[32c ..], group 2c + 1 the high ones.
      const uint8_t* qs = block + 16 + 32 * (g / 2);
#pragma GCC unroll 2
      for (int v = 0; v < 2; ++v) {
        const __m512i bytes = Bytes16(qs + 16 * v);
        out[v] = _mm512_cvtepi32_ps((g & 1) ? _mm512_srli_epi32(bytes, 4)
                                            : _mm512_and_si512(bytes, low4));
      }
    } else {
      WidenBytes(F::Group(block, g), out);
    }
  }
  // GEMV tiles of quantized weights: weight rows per tile for m = 1, m = 2 and larger m (in
  // chunks of kQuantMrMax x rows). At m = 1, 4 rows beat 8 on Zen 4 for every format (q6_k
  // 1.3-2x, q4_k 1.1x, one and two threads; bench/results/cpu_matmul_quant.md): 8 rows' block
  // scales and dequantized groups no longer fit the registers beside the accumulators.
  static constexpr int kQuantRowsM1 = 4;
  // QuantDotRowFactored at m = 1 measured level or slower on Zen 5 (cpu_matmul_quant.md).
  static constexpr bool kQuantFactoredM1 = false;
  static constexpr int kQuantRowsM2 = 6;
  static constexpr int kQuantRowsMany = 4;
  static constexpr int kQuantMrMax = 4;
  static void QuantRows(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin,
                        int64_t row_end) {
    QuantGemvRows<Avx512>(x, p, row_begin, row_end);
  }
};

// GEMV (GemvLayout, matmul.h): kSapphireRapids, kNr = 8 runs of weight rows per thread for m <= 3
// and 6 for m >= 4 (the Sapphire Rapids baselines reach the roofline with 8 streams per core; a
// Xeon with AMX read 95-97 % of its probe so), each prefetched 512 B ahead into L1. kZen4: 6
// runs at every m: at m = 1 without software prefetch, from m = 2 on each run prefetched 2 KiB
// ahead into L2 (kZen4PrefetchBytes, DotTile's sign convention). On Zen 4, with the weights on
// huge pages, 8 runs prefetched into L1 read 10-25 % slower than 6 at m = 1 and 2, and the L2
// prefetch gains 10-33 % at m = 2-4 on one thread over none or the L1 one (bench/results/
// cpu_matmul.md, "GEMV streams per CPU"; at m = 1 it loses 7 %).
constexpr int kGemvPrefetchBytes = 512;
constexpr int kZen4PrefetchBytes = -2048;

// Dot-kernel blocking for GemmRowsAvx512 (matmul_dot_inl.h): x rows, k, weight rows per block;
// 4 x rows and 6 weight rows of kc in a 48 KiB L1, nc weight rows and mc x rows of kc in L2.
constexpr FmaBlocking kDotBlocking = {64, 512, 96};

// GEMM (matmul_panel_inl.h): 12 weight rows per tile; tokens, k and weight rows per block, sized
// for a 48 KiB L1 (a 32-token panel of kc: 32 KiB) and a 2 MiB L2 (block + accumulator + x^T of
// mc tokens: 480 KiB). Not tuned on hardware yet (see bench/results/cpu_matmul.md).
constexpr int kGemmRows = 12;
constexpr PanelBlocking kGemmBlocking = {256, 256, 96};
constexpr int64_t kGemmPanel = 2 * Avx512::kLanes;  // tokens per x^T panel
static_assert(kGemmBlocking.kc % 256 == 0, "k blocks must hold whole quantization blocks");

}  // namespace

void GemvAvx512(const GroupArgs& args, ThreadPool& pool) {
  const bool int8 = UseInt8Gemv(args);
  // The f32 GEMV, or the int8 one (x quantized once; float weights of the group on the f32 path).
  auto run = [&]<int kMr, int kNr>() {
    if (int8) {
      RunInt8GemvGroup<Avx512, kMr, kNr, kGemvPrefetchBytes>(args, pool);
    } else if (args.gemv_layout == GemvLayout::kZen4) {
      RunGemvGroup<Avx512, kMr, 6, (kMr == 1 ? 0 : kZen4PrefetchBytes)>(args, pool);
    } else {
      RunGemvGroup<Avx512, kMr, kNr, kGemvPrefetchBytes>(args, pool);
    }
  };
  switch (args.x.m) {
    case 1:
      run.template operator()<1, 8>();
      break;
    case 2:
      run.template operator()<2, 8>();
      break;
    case 3:
      run.template operator()<3, 8>();
      break;
    default:
      run.template operator()<4, 6>();
      break;
  }
}

void QuantWidenRowsAvx512(const MatmulProjection& p, int64_t k, int64_t n0, int64_t rows,
                          int64_t k0, int64_t len, int64_t ld, float* dst) {
  WithQuantFormat(p.dtype, [&]<class F>(F) {
    QuantWidenRows<Avx512, F>(p, k, n0, rows, k0, len, ld, dst);
  });
}

void GemmAvx512(const GroupArgs& args, ThreadPool& pool) {
  RunPanelGroup<Avx512, kGemmRows>(args, pool, kGemmBlocking);
}

size_t GemmAvx512WorkspaceBytes(int64_t m, int64_t k, int num_threads) {
  return PanelWorkspaceBytes(m, k, num_threads, kGemmPanel, kGemmBlocking);
}

void GemmRowsAvx512(const MatmulInput& x, const MatmulProjection& projection, int64_t row_begin,
                    int64_t row_end) {
  BlockedProjectionRows<Avx512, 4, 6>(x, projection, row_begin, row_end, kDotBlocking);
}

}  // namespace loom::cpu::matmul_internal
