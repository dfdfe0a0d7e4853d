// The AVX512-BF16 GEMM: bf16 weights times bf16-rounded activations with vdpbf16ps, for the
// explicit MatmulPrecision::kBf16 (the AVX-512 level includes AVX512_BF16, cpu_features.h).
//
// vdpbf16ps multiplies 16 lanes of bf16 pairs and adds both products to an f32 accumulator: 32
// multiply-adds per instruction where an f32 FMA does 16, and the weights need no widening: a
// weight row's elements (k, k + 1) are one 32-bit word of the checkpoint, broadcast as it is.
//
// Math: y^T[j, i] = sum over pairs p of W[j, 2p] x[i, 2p] + W[j, 2p + 1] x[i, 2p + 1]. x is packed
// once per call into panels of 32 tokens of bf16 pairs, xt[p][token] = (x[token, 2p],
// x[token, 2p + 1]) (zero past m, and past k when k is odd); each thread copies a block of nc of
// its weight rows × kc / 2 pairs into tile order (for each group of kNr rows: pair-major, the kNr
// rows' words side by side) so a tile's broadcasts walk one contiguous run. Register tile: kNr
// weight rows × 32 tokens = 2 * kNr accumulators. Products of two bf16 are exact in f32; sums run
// in f32 in increasing pair order within a k block. The error is x's rounding to bf16 (relative
// 2^-9 per element), as for the AMX path at this precision.
//
// Work split and loop nest as in matmul_panel_inl.h (whose workspace layout, write-out and
// stealing schedule it shares): units of mc tokens × nc rows, m0 > n0 in each thread's share,
// k0 (kc) > panel > kNr rows inside a unit.
//
// Block-quantized weights (q8_0 ... q6_k) take the same tiles: each block of weight rows is
// dequantized exactly (as ref::DequantizeRow) and rounded to bf16 as it is packed, once per mc
// tokens. So the result is a bf16 matmul of bf16-rounded x and bf16-rounded dequantized weights,
// at twice the multiply-adds per instruction of the f32 panel GEMM that the default precision
// runs; the extra error is the weights' rounding, relative 2^-9 per element like x's.
//
// The GEMV at kBf16 for m = 1 (decode of one sequence): x is rounded once per call into bf16 in
// the workspace, and vdpbf16ps takes 32 weights straight from the row as they are stored: one
// load and one instruction per 64 bytes of weight, where the f32 FMA GEMV widens in two more.
// Each thread cuts its contiguous rows into 2 runs read side by side (a tile takes one row of
// each). Measured on Zen 4 (bench/results/cpu_matmul.md): 23-27 GB/s on one thread and 30-33 on
// two, against 15-19 / 23-27 for one run and 17-19 / 27-28 for the f32 FMA GEMV; 4 runs were level
// with 2, and 4 adjacent rows per tile lower. From m = 2 on, vdpbf16ps with x reloaded per row
// group read no faster than the FMA GEMV (which reuses x over 6-8 rows), so m >= 2 and kHighest
// keep that.
#include "kernels/cpu/x86_intrinsics.h"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>
#include <cstring>

#include "kernels/common/dtype.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_panel_inl.h"

namespace loom::cpu::matmul_internal {
namespace {

#if defined(LOOM_ISA_EMULATION)
using Bf16Pairs = simde__m512bh;
#else
using Bf16Pairs = __m512bh;
#endif

// The same 64 bytes as 32 bf16 values, for vdpbf16ps.
inline Bf16Pairs AsPairs(__m512i v) {
  Bf16Pairs out;
  static_assert(sizeof(out) == sizeof(v));
  std::memcpy(&out, &v, sizeof(v));
  return out;
}

constexpr int kNr = 12;
constexpr int64_t kPanel = 32;
// Tokens, k (elements, even) and weight rows per block: the x^T slice of a panel (kc / 2 pairs ×
// 32 tokens × 4 bytes = 16 KiB) in L1, the tile-ordered block (nc × kc / 2 words = 48 KiB) and
// the accumulator (nc × mc floats = 192 KiB) in L2. mc = 512 packs each weight block once for a
// 512-token prefill: measured on Zen 4 (1 MiB L2), 256 -> 512 took the 1.1B-shaped layers from
// 182-193 to 192-203 GFLOP/s on one thread (bench/results/cpu_matmul.md).
constexpr PanelBlocking kBlocking = {512, 256, 96};
static_assert(kBlocking.kc % 2 == 0 && kBlocking.nc % kNr == 0 && kBlocking.mc % kPanel == 0);
static_assert(kBlocking.kc % 256 == 0, "k blocks must hold whole quantization blocks");

// 16 floats rounded to bf16 as F32ToBf16 rounds them (to nearest even, NaN kept quiet): 8 pair
// words, element 2i in the low half of word i.
inline __m256i RoundToPairs(const float* p) {
  const __m512i bits = _mm512_castps_si512(_mm512_loadu_ps(p));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  // |bits| > the bits of +inf: NaN (both sides are non-negative, so a signed compare does).
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  const __m512i halves = _mm512_mask_mov_epi32(rounded, nan, quiet);
  // Each 64-bit lane's two bf16 into its low word, then the 8 low words packed (vpmovqd).
  return _mm512_cvtepi64_epi32(_mm512_or_si512(halves, _mm512_srli_epi64(halves, 16)));
}

// Panel p of x^T as bf16 pairs: words[q * 32 + c] for pair q and token c. Groups of 8 tokens ×
// 8 whole pairs are rounded 16 floats at a time and transposed in registers; the rest (tokens
// past the last group of 8, pairs past the last group of 8, an odd k's half pair) one by one.
void PackPairsPanel(const MatmulInput& x, int64_t p, uint32_t* words) {
  const int64_t pairs = (x.k + 1) / 2;
  const int64_t pairs8 = x.k / 16 * 8;
  int64_t c0 = 0;
  for (; c0 < kPanel && p * kPanel + c0 + 8 <= x.m; c0 += 8) {
    const float* rows = x.data + (p * kPanel + c0) * x.stride;
    for (int64_t q = 0; q < pairs8; q += 8) {
      __m256 r[8], out[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        r[j] = _mm256_castsi256_ps(RoundToPairs(rows + j * x.stride + 2 * q));
      }
      Transpose8x8(r, out);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        _mm256_storeu_ps(reinterpret_cast<float*>(words + (q + t) * kPanel + c0), out[t]);
      }
    }
  }
  for (int64_t c = 0; c < kPanel; ++c) {
    const int64_t i = p * kPanel + c;
    const int64_t q_begin = c < c0 ? pairs8 : 0;
    if (i >= x.m) {
      for (int64_t q = q_begin; q < pairs; ++q) words[q * kPanel + c] = 0;
      continue;
    }
    const float* row = x.data + i * x.stride;
    for (int64_t q = q_begin; q < pairs; ++q) {
      const uint32_t lo = F32ToBf16(row[2 * q]);
      const uint32_t hi = 2 * q + 1 < x.k ? F32ToBf16(row[2 * q + 1]) : 0u;
      words[q * kPanel + c] = lo | (hi << 16);
    }
  }
}

// Pairs [q, q + 16) of four weight rows (src[i] points at a row's pair 0) into tile order: 4×4
// transposes within each 128-bit lane leave in lane L of t[j] the four rows' words of pair
// q + 4L + j, stored as 16 bytes at dst[(4L + j) * kNr]. 4 loads, 8 shuffles and 16 stores for 64
// words.
inline void PackFourRows(const uint16_t* const (&src)[4], int64_t q, uint32_t* dst) {
  const __m512i a = _mm512_loadu_si512(src[0] + 2 * q);
  const __m512i b = _mm512_loadu_si512(src[1] + 2 * q);
  const __m512i c = _mm512_loadu_si512(src[2] + 2 * q);
  const __m512i d = _mm512_loadu_si512(src[3] + 2 * q);
  const __m512i ab_lo = _mm512_unpacklo_epi32(a, b);  // per lane: a0 b0 a1 b1
  const __m512i ab_hi = _mm512_unpackhi_epi32(a, b);  // a2 b2 a3 b3
  const __m512i cd_lo = _mm512_unpacklo_epi32(c, d);
  const __m512i cd_hi = _mm512_unpackhi_epi32(c, d);
  const __m512i t[4] = {_mm512_unpacklo_epi64(ab_lo, cd_lo), _mm512_unpackhi_epi64(ab_lo, cd_lo),
                        _mm512_unpacklo_epi64(ab_hi, cd_hi), _mm512_unpackhi_epi64(ab_hi, cd_hi)};
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j * kNr), _mm512_castsi512_si128(t[j]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (4 + j) * kNr),
                     _mm512_extracti32x4_epi32(t[j], 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (8 + j) * kNr),
                     _mm512_extracti32x4_epi32(t[j], 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (12 + j) * kNr),
                     _mm512_extracti32x4_epi32(t[j], 3));
  }
}

// Rows [n0, n0 + rows) × pairs [q0, q0 + num_pairs) of a bf16 weight into tile order:
// dst[(g * num_pairs + q) * kNr + r] = the pair (W[n0 + g kNr + r, 2(q0 + q)], ... + 1), zero for
// rows past `rows` (up to a whole tile) and for the missing half of an odd k. Whole groups of kNr
// rows go 16 pairs at a time through PackFourRows; the rest (a partial last group, the last
// < 16 pairs, the half pair of an odd k) word by word.
void PackWeightBlock(const MatmulProjection& p, int64_t k, int64_t n0, int64_t rows, int64_t q0,
                     int64_t num_pairs, uint32_t* dst) {
  static_assert(kNr % 4 == 0);
  const auto* w = static_cast<const uint16_t*>(p.weight);
  const int64_t groups = (rows + kNr - 1) / kNr;
  const bool odd = k % 2 != 0;
  const int64_t last_pair = (k + 1) / 2 - 1;
  // Pairs of the block with both halves inside the row, rounded down to whole runs of 16.
  const int64_t whole_pairs = MinOf(num_pairs, k / 2 - q0);
  const int64_t vector_pairs = whole_pairs > 0 ? whole_pairs / 16 * 16 : 0;
  for (int64_t g = 0; g < groups; ++g) {
    uint32_t* group_dst = dst + g * num_pairs * kNr;
    int64_t q_begin = 0;
    if ((g + 1) * kNr <= rows) {
      for (int r = 0; r < kNr; r += 4) {
        const uint16_t* src[4];
        for (int i = 0; i < 4; ++i) src[i] = w + (n0 + g * kNr + r + i) * k + 2 * q0;
        for (int64_t q = 0; q < vector_pairs; q += 16) {
          PackFourRows(src, q, group_dst + q * kNr + r);
        }
      }
      q_begin = vector_pairs;
    }
    for (int r = 0; r < kNr; ++r) {
      const int64_t row = g * kNr + r;
      uint32_t* out = group_dst + r;
      if (row >= rows) {
        for (int64_t q = q_begin; q < num_pairs; ++q) out[q * kNr] = 0;
        continue;
      }
      const uint16_t* src = w + (n0 + row) * k + 2 * q0;
      for (int64_t q = q_begin; q < num_pairs; ++q) {
        uint32_t word;
        if (odd && q0 + q == last_pair) {
          word = src[2 * q];  // the row ends here: the high half stays zero
        } else {
          std::memcpy(&word, src + 2 * q, sizeof(word));
        }
        out[q * kNr] = word;
      }
    }
  }
}

// Floats of a thread's scratch for PackQuantWeightBlock: kNr rows of kc f32, then of kc bf16.
constexpr int64_t kQuantScratchFloats = kNr * kBlocking.kc + kNr * kBlocking.kc / 2;
// The scratch is the half of the thread's block room that the bf16 block leaves free.
static_assert(kQuantScratchFloats <= kBlocking.nc * kBlocking.kc / 2);

// Rows [n0, n0 + rows) × pairs [q0, q0 + num_pairs) of a block-quantized weight into the tile
// order of PackWeightBlock: each group of kNr rows is dequantized exactly as ref::DequantizeRow
// (QuantWidenRowsAvx512) into f32 at `scratch`, rounded to bf16 pairs as x is (RoundToPairs) and
// transposed by PackFourRows; rows past `rows` are zero. 2 * num_pairs is a whole number of the
// format's blocks (kc is a multiple of 256 and k of the block size), so of 32 elements.
void PackQuantWeightBlock(const MatmulProjection& p, int64_t k, int64_t n0, int64_t rows,
                          int64_t q0, int64_t num_pairs, float* scratch, uint32_t* dst) {
  const int64_t len = 2 * num_pairs;
  float* wide = scratch;                                            // [kNr][len] f32
  auto* narrow = reinterpret_cast<uint32_t*>(scratch + kNr * len);  // [kNr][num_pairs] pairs
  const int64_t groups = (rows + kNr - 1) / kNr;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t group_rows = MinOf(int64_t{kNr}, rows - g * kNr);
    QuantWidenRowsAvx512(p, k, n0 + g * kNr, group_rows, 2 * q0, len, len, wide);
    for (int64_t r = 0; r < kNr; ++r) {
      uint32_t* out = narrow + r * num_pairs;
      if (r >= group_rows) {
        std::memset(out, 0, sizeof(uint32_t) * static_cast<size_t>(num_pairs));
        continue;
      }
      for (int64_t q = 0; q < num_pairs; q += 8) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + q),
                            RoundToPairs(wide + r * len + 2 * q));
      }
    }
    uint32_t* group_dst = dst + g * num_pairs * kNr;
    for (int r = 0; r < kNr; r += 4) {
      const uint16_t* src[4];
      for (int i = 0; i < 4; ++i) {
        src[i] = reinterpret_cast<const uint16_t*>(narrow + (r + i) * num_pairs);
      }
      for (int64_t q = 0; q < num_pairs; q += 16) PackFourRows(src, q, group_dst + q * kNr + r);
    }
  }
}

// Prefetches rows [r_begin, r_end) of p's block at (n0, k0, len), bf16 or block-quantized.
void PrefetchRows(const MatmulProjection& p, int64_t k, int64_t n0, int64_t r_begin,
                  int64_t r_end, int64_t k0, int64_t len) {
  if (p.dtype == DType::kBF16) {
    PrefetchBlockRows<Bf16Weight>(p, k, n0, r_begin, r_end, k0, len);
    return;
  }
  WithQuantFormat(p.dtype, [&]<class F>(F) {
    PrefetchBlockRows<QuantWeight<F>>(p, k, n0, r_begin, r_end, k0, len);
  });
}

// The tile's sums over `num_pairs` pairs, stored to (first) or added to `acc_out` (stride ld).
template <int kMv>
void PairsTile(const uint32_t* xt, const uint32_t* w, int64_t num_pairs, float* acc_out,
               int64_t ld, bool first) {
  __m512 acc[kNr][kMv];
#pragma GCC unroll 32
  for (int r = 0; r < kNr; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < kMv; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t q = 0; q < num_pairs; ++q) {
    Bf16Pairs xv[kMv];
#pragma GCC unroll 2
    for (int v = 0; v < kMv; ++v) {
      xv[v] = AsPairs(_mm512_loadu_si512(xt + q * kPanel + v * 16));
    }
    const uint32_t* wq = w + q * kNr;
#pragma GCC unroll 32
    for (int r = 0; r < kNr; ++r) {
      const Bf16Pairs wv = AsPairs(_mm512_set1_epi32(static_cast<int>(wq[r])));
#pragma GCC unroll 2
      for (int v = 0; v < kMv; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], wv, xv[v]);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < kNr; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < kMv; ++v) {
      float* out = acc_out + r * ld + v * 16;
      _mm512_storeu_ps(out, first ? acc[r][v] : _mm512_add_ps(acc[r][v], _mm512_loadu_ps(out)));
    }
  }
}

// One unit of the rows' work (PanelUnit, matmul_panel_inl.h); `next` as in RunPanelUnit.
void PairsUnit(const MatmulInput& x, const MatmulProjection& p, const PanelUnit& unit,
               const PanelUnit* next, const uint32_t* x_panels, float* thread_buffer) {
  const PanelBlocking& b = kBlocking;
  const int64_t pairs = (x.k + 1) / 2;
  const int64_t block_pairs = b.kc / 2;
  auto* block = reinterpret_cast<uint32_t*>(thread_buffer);
  float* quant_scratch = thread_buffer + b.nc * b.kc / 2;
  float* acc = thread_buffer + b.nc * b.kc;
  const bool quantized = p.dtype != DType::kBF16;
  const int64_t m0 = unit.m0;
  const int64_t m1 = MinOf(x.m, m0 + b.mc);
  const int64_t panels = (m1 - m0 + kPanel - 1) / kPanel;
  const int64_t n0 = unit.n0;
  const int64_t rows = unit.rows;
  const int64_t groups = (rows + kNr - 1) / kNr;
  const bool next_same = next != nullptr && next->projection == unit.projection;
  for (int64_t q0 = 0; q0 < pairs; q0 += block_pairs) {
    const int64_t num_pairs = MinOf(block_pairs, pairs - q0);
    if (quantized) {
      PackQuantWeightBlock(p, x.k, n0, rows, q0, num_pairs, quant_scratch, block);
    } else {
      PackWeightBlock(p, x.k, n0, rows, q0, num_pairs, block);
    }
    // The block after this one, the next k block of these rows or else the next unit's first,
    // is prefetched a share of rows per panel (as the FMA panels do): without it the pack waits
    // on DRAM for each row's few lines in turn.
    const bool next_k = q0 + block_pairs < pairs;
    const int64_t next_n0 = next_k ? n0 : next_same ? next->n0 : 0;
    const int64_t next_q0 = next_k ? q0 + block_pairs : 0;
    const int64_t next_rows = next_k ? rows : next_same ? next->rows : 0;
    const int64_t next_len = MinOf(b.kc, x.k - 2 * next_q0);
    for (int64_t i = m0; i < m1; i += kPanel) {
      const uint32_t* xt = x_panels + (i / kPanel) * kPanel * pairs + q0 * kPanel;
      const int64_t panel = (i - m0) / kPanel;
      PrefetchRows(p, x.k, next_n0, panel * next_rows / panels, (panel + 1) * next_rows / panels,
                   2 * next_q0, next_len);
      for (int64_t g = 0; g < groups; ++g) {
        float* acc_tile = acc + g * kNr * b.mc + (i - m0);
        const uint32_t* w = block + g * num_pairs * kNr;
        if (m1 - i > 16) {
          PairsTile<2>(xt, w, num_pairs, acc_tile, b.mc, q0 == 0);
        } else {
          PairsTile<1>(xt, w, num_pairs, acc_tile, b.mc, q0 == 0);
        }
      }
    }
  }
  WriteBlock(p, n0, rows, m0, m1, acc, b.mc);
}

// ---- GEMV ----

// The x row in bf16 is padded with zeros to whole steps of 32 elements.
constexpr int64_t kGemvStep = 32;
constexpr int64_t kGemvMaxM = 1;  // GemvBf16DotMaxM (see the file comment)
// Runs of rows read side by side per thread (see the file comment).
constexpr int kGemvRuns = 2;

int64_t GemvPaddedK(int64_t k) { return (k + kGemvStep - 1) / kGemvStep * kGemvStep; }

// The x row [k] into bf16, GemvPaddedK(k) elements at out.
void RoundXToBf16(const MatmulInput& x, uint16_t* out) {
  int64_t c = 0;
  for (; c < x.k; ++c) out[c] = F32ToBf16(x.data[c]);  // as the GEMM's x panels round
  for (; c < GemvPaddedK(x.k); ++c) out[c] = 0;
}

// sums[r] = weight row r · x over the padded k, for the kR weight rows w[r]. Two accumulators
// per row (even and odd steps) keep the chains of dependent vdpbf16ps short. With `tail`,
// tails[r] is row r's last partial step, zero-padded.
template <int kR>
inline void GemvTile(const uint16_t* const (&w)[kR], int64_t whole_steps, bool tail,
                     const uint16_t (&tails)[kR][kGemvStep], const uint16_t* x, float* sums) {
  __m512 acc[kR][2];
#pragma GCC unroll 4
  for (int r = 0; r < kR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  // One step of 32 elements of the rows at `rows` (from element w_off) against x from element
  // k, into accumulator `chain`.
  auto step = [&](const uint16_t* const (&rows)[kR], int64_t w_off, int64_t k, int chain) {
    const Bf16Pairs xv = AsPairs(_mm512_loadu_si512(x + k));
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) {
      acc[r][chain] =
          _mm512_dpbf16_ps(acc[r][chain], AsPairs(_mm512_loadu_si512(rows[r] + w_off)), xv);
    }
  };
  int64_t s = 0;
  for (; s + 2 <= whole_steps; s += 2) {
    step(w, s * kGemvStep, s * kGemvStep, 0);
    step(w, (s + 1) * kGemvStep, (s + 1) * kGemvStep, 1);
  }
  if (s < whole_steps) {
    step(w, s * kGemvStep, s * kGemvStep, 0);
    ++s;
  }
  if (tail) {
    const uint16_t* tail_rows[kR];
#pragma GCC unroll 4
    for (int r = 0; r < kR; ++r) tail_rows[r] = tails[r];
    step(tail_rows, 0, s * kGemvStep, 1);
  }
#pragma GCC unroll 4
  for (int r = 0; r < kR; ++r) sums[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
}

// Weight rows n, n + spread, ..., n + (kR - 1) spread of one bf16 projection against x.
template <int kR>
void GemvRowGroup(const MatmulInput& x, const MatmulProjection& p, int64_t n, int64_t spread,
                  const uint16_t* x_bf16) {
  const auto* w = static_cast<const uint16_t*>(p.weight);
  const int64_t whole_steps = x.k / kGemvStep;
  const int64_t tail_len = x.k - whole_steps * kGemvStep;
  const uint16_t* rows[kR];
  alignas(64) uint16_t tails[kR][kGemvStep] = {};
  for (int r = 0; r < kR; ++r) {
    rows[r] = w + (n + r * spread) * x.k;
    // A partial last step is copied out so no load reads past the row (the weight is a mapping).
    if (tail_len > 0) {
      std::memcpy(tails[r], rows[r] + whole_steps * kGemvStep, tail_len * sizeof(uint16_t));
    }
  }
  float sums[kR];
  GemvTile<kR>(rows, whole_steps, tail_len > 0, tails, x_bf16, sums);
  for (int r = 0; r < kR; ++r) {
    const int64_t row = n + r * spread;
    p.y[row] = p.bias != nullptr ? sums[r] + p.bias[row] : sums[r];
  }
}

// Weight rows [row_begin, row_end) of one bf16 projection: cut into kGemvRuns equal runs read
// side by side (a tile takes one row of each), the rows past the last whole tile one at a time.
void GemvRows(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin, int64_t row_end,
              const uint16_t* x_bf16) {
  const int64_t run = (row_end - row_begin) / kGemvRuns;
  for (int64_t j = 0; j < run; ++j) {
    GemvRowGroup<kGemvRuns>(x, p, row_begin + j, run, x_bf16);
  }
  for (int64_t n = row_begin + kGemvRuns * run; n < row_end; ++n) {
    GemvRowGroup<1>(x, p, n, 1, x_bf16);
  }
}

}  // namespace

bool GemmBf16DotAvx512Applies(const GroupArgs& args) {
  if (args.precision != MatmulPrecision::kBf16) return false;
  for (const MatmulProjection& p : args.projections) {
    // A quantized row is whole blocks (the dispatcher's check), and kc is whole blocks of every
    // format.
    if (p.dtype != DType::kBF16 && !IsQuantizedDType(p.dtype)) return false;
  }
  return true;
}

void GemmBf16DotAvx512(const GroupArgs& args, ThreadPool& pool) {
  const PanelWorkspace ws = CarvePanelWorkspace(args.workspace, args.x.m, args.x.k, kPanel,
                                                kBlocking);
  auto* x_panels = reinterpret_cast<uint32_t*>(ws.x_panels);
  const int64_t pairs = (args.x.k + 1) / 2;
  pool.ParallelFor((args.x.m + kPanel - 1) / kPanel, [&](int64_t begin, int64_t end, int) {
    for (int64_t p = begin; p < end; ++p) PackPairsPanel(args.x, p, x_panels + p * kPanel * pairs);
  });
  // Units handed out with stealing at the end, as in RunPanelGroup.
  PanelSchedule schedule(args.projections, args.x.m, kNr, kBlocking, pool.num_threads());
  pool.RunOnAllThreads([&](int64_t, int64_t, int thread) {
    float* buffer = ws.thread_buffers + thread * (ws.block_floats + ws.acc_floats);
    const PanelUnit* next = nullptr;
    while (const PanelUnit* unit = schedule.Claim(thread, &next)) {
      PairsUnit(args.x, args.projections[static_cast<size_t>(unit->projection)], *unit, next,
                x_panels, buffer);
    }
  });
}

size_t GemmBf16DotAvx512WorkspaceBytes(int64_t m, int64_t k, int num_threads) {
  // x^T as pairs takes at most the f32 panels' room; the tile-ordered block half the f32 block's.
  return PanelWorkspaceBytes(m, k, num_threads, kPanel, kBlocking);
}

int64_t GemvBf16DotMaxM() { return kGemvMaxM; }

bool GemvBf16DotAvx512Applies(const GroupArgs& args) {
  if (args.precision != MatmulPrecision::kBf16 || args.x.m > kGemvMaxM) return false;
  for (const MatmulProjection& p : args.projections) {
    if (p.dtype != DType::kBF16) return false;
  }
  return true;
}

void GemvBf16DotAvx512(const GroupArgs& args, ThreadPool& pool) {
  const auto address = reinterpret_cast<uintptr_t>(args.workspace);
  auto* x_bf16 = reinterpret_cast<uint16_t*>((address + 63) & ~uintptr_t{63});
  RoundXToBf16(args.x, x_bf16);
  // Units of 4 rows; each thread's share in pieces (GemvStealPieces), the 2 runs inside a piece.
  constexpr int64_t kUnitRows = 4;
  ParallelForStealing(pool, CountRowUnits(args.projections, kUnitRows),
                      GemvStealPieces(args, pool.num_threads()),
                      [&](int64_t unit_begin, int64_t unit_end) {
    ForEachRowRange(args.projections, kUnitRows, unit_begin, unit_end,
                    [&](const MatmulProjection& p, int64_t row_begin, int64_t row_end) {
                      GemvRows(args.x, p, row_begin, row_end, x_bf16);
                    });
  });
}

size_t GemvBf16DotAvx512WorkspaceBytes(int64_t m, int64_t k) {
  return static_cast<size_t>(64 + m * GemvPaddedK(k) * 2);
}

}  // namespace loom::cpu::matmul_internal
