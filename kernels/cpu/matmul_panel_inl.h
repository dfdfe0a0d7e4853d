// The FMA GEMM for large m, written once over a vector type and instantiated by matmul_avx2.cc and
// matmul_avx512.cc with their vector traits (see matmul_dot_inl.h for the traits' contract; this
// file also needs T::Broadcast(const float*), T::Add(V, V) and T::Store(float*, V)).
//
// Math: y^T[j, i] = sum_k W[j, k] * x^T[k, i]. Vectors run along tokens i: x is packed once per
// call into panels of kPanel = 2 * kLanes tokens, x^T [k][kPanel] (zero past m), and a weight
// element is broadcast against a panel row. The register tile is kNr weight rows by one panel:
// 2 * kNr accumulators, per k two x loads, kNr broadcasts and 2 * kNr FMAs, with no conversion
// or horizontal sum in the loop. Sums run in increasing k within each kc block.
//
// Weights stay where they are: each thread widens a block of nc of its rows × kc of k to f32 in
// its own workspace (zero rows pad the block to a multiple of kNr) right before using it, so the
// tile loop reads contiguous f32 rows whatever the stored dtype and alignment. Block-quantized
// weights are dequantized into that block (matmul_quant_inl.h); kc is a whole number of their
// blocks (256 elements), so a k block never splits a quantization block.
//
// Work split: the group's weight rows are split evenly between the threads in units of kNr, and
// each thread's share is cut into units of mc tokens × nc rows (PanelSchedule), run in the order
//   m0 (mc tokens) > n0 (nc rows) > [k0 (kc) > panel > kNr rows inside a unit]
// A thread that runs out of its own units takes the last ones left of another thread, so a
// thread slowed by a busy core does not hold up the call. A unit writes its own mc × nc outputs
// with the same sums whichever thread runs it: results do not depend on the split.
// The x^T panel slice (kPanel × kc floats) stays in L1 while the kNr-row groups of the converted
// block pass over it; the block (nc × kc floats) and the y^T accumulator (nc × mc floats) stay in
// L2. Bytes from memory: the weight once per mc tokens, x^T once per nc rows (from L3).
//
// The loops over tile dimensions carry `#pragma GCC unroll`: without it gcc -O3 keeps the
// accumulator arrays in memory and stores them on every step.
//
// Unnamed namespace on purpose, as in matmul_dot_inl.h: every instruction-set file gets its own
// instantiations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/matmul_dot_inl.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_quant_inl.h"
#include "kernels/cpu/work_claims.h"

namespace loom::cpu::matmul_internal {
namespace {

// Loop-nest sizes; mc is a multiple of the panel width, nc of kNr.
struct PanelBlocking {
  int64_t mc;
  int64_t kc;
  int64_t nc;
};

// The call's workspace: x^T panels for all tokens, then per thread a converted weight block and
// a y^T accumulator. Offsets in floats from a 64-byte aligned base.
struct PanelWorkspace {
  float* x_panels;        // ceil(m / panel) panels of [k][panel]
  float* thread_buffers;  // per thread: block_floats + acc_floats
  int64_t block_floats;   // nc × kc
  int64_t acc_floats;     // nc × mc
};

inline int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

inline size_t PanelWorkspaceBytes(int64_t m, int64_t k, int num_threads, int64_t panel,
                                  const PanelBlocking& b) {
  const int64_t x_floats = RoundUp(m, panel) * k;
  const int64_t per_thread = b.nc * b.kc + b.nc * b.mc;
  return static_cast<size_t>((x_floats + per_thread * num_threads) * 4 + 64);
}

inline PanelWorkspace CarvePanelWorkspace(void* workspace, int64_t m, int64_t k, int64_t panel,
                                          const PanelBlocking& b) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(workspace);
  float* base = reinterpret_cast<float*>((address + 63) & ~uintptr_t{63});
  return {base, base + RoundUp(m, panel) * k, b.nc * b.kc, b.nc * b.mc};
}

// Eight vectors of eight floats transposed: lane j of out[t] is lane t of r[j]. Pairs of rows
// interleaved, then quads, then the 128-bit halves exchanged (24 shuffles).
inline void Transpose8x8(const __m256 (&r)[8], __m256 (&out)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  out[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  out[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  out[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  out[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  out[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  out[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  out[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  out[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// dst[t * dst_stride + j] = src[j * src_stride + t] for t, j < 8 (32-bit elements, any bits).
inline void TransposeCopy8x8(const float* src, int64_t src_stride, float* dst,
                             int64_t dst_stride) {
  __m256 r[8], out[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + j * src_stride);
  Transpose8x8(r, out);
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) _mm256_storeu_ps(dst + t * dst_stride, out[t]);
}

// Panel p of x^T: xt[kk * panel + c] = x[p * panel + c, kk], zero for tokens past m. Whole
// groups of 8 tokens × 8 of k are transposed in registers (panel is a multiple of 8).
inline void PackXPanel(const MatmulInput& x, int64_t p, int64_t panel, float* xt) {
  const int64_t k8 = x.k / 8 * 8;
  int64_t c0 = 0;
  for (; c0 < panel && p * panel + c0 + 8 <= x.m; c0 += 8) {
    const float* rows = x.data + (p * panel + c0) * x.stride;
    for (int64_t kk = 0; kk < k8; kk += 8) {
      TransposeCopy8x8(rows + kk, x.stride, xt + kk * panel + c0, panel);
    }
    for (int64_t c = c0; c < c0 + 8; ++c) {
      const float* row = x.data + (p * panel + c) * x.stride;
      for (int64_t kk = k8; kk < x.k; ++kk) xt[kk * panel + c] = row[kk];
    }
  }
  for (int64_t c = c0; c < panel; ++c) {
    const int64_t i = p * panel + c;
    if (i >= x.m) {
      for (int64_t kk = 0; kk < x.k; ++kk) xt[kk * panel + c] = 0.0f;
      continue;
    }
    const float* row = x.data + i * x.stride;
    for (int64_t kk = 0; kk < x.k; ++kk) xt[kk * panel + c] = row[kk];
  }
}

// dst[r * kc + kk] = W[n0 + r, k0 + kk] as f32 for r < rows, kk < len, for a float weight.
// Four rows are read side by side so the block streams in from memory with several misses in
// flight (see the GEMV notes in matmul_dot_inl.h).
template <class T, class W>
void WidenFloatRows(const MatmulProjection& p, int64_t k, int64_t n0, int64_t rows, int64_t k0,
                    int64_t len, int64_t kc, float* dst) {
  using S = typename W::Storage;
  constexpr int kLanes = T::kLanes;
  constexpr int kRowsAtOnce = 4;
  const S* w = static_cast<const S*>(p.weight) + n0 * k + k0;
  const int64_t full = len / kLanes * kLanes;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsAtOnce) {
    const S* src[kRowsAtOnce];
    float* out[kRowsAtOnce];
#pragma GCC unroll 4
    for (int i = 0; i < kRowsAtOnce; ++i) {
      const int64_t r = MinOf<int64_t>(r0 + i, rows - 1);  // repeats the last row: same values
      src[i] = w + r * k;
      out[i] = dst + r * kc;
    }
    for (int64_t kk = 0; kk < full; kk += kLanes) {
#pragma GCC unroll 4
      for (int i = 0; i < kRowsAtOnce; ++i)
        T::Store(out[i] + kk, T::template LoadW<W>(src[i] + kk));
    }
    if (full < len) {  // the partial last vector goes through a local copy
      for (int i = 0; i < kRowsAtOnce; ++i) {
        alignas(64) float tail[kLanes];
        T::Store(tail, T::template LoadWPartial<W>(src[i] + full, static_cast<int>(len - full)));
        for (int64_t t = 0; t < len - full; ++t) out[i][full + t] = tail[t];
      }
    }
  }
}

// dst[r * kc + kk] = W[n0 + r, k0 + kk] as f32 for r < rows, kk < len; rows up to rows_pad are 0.
template <class T, class W>
void WidenBlock(const MatmulProjection& p, int64_t k, int64_t n0, int64_t rows, int64_t rows_pad,
                int64_t k0, int64_t len, int64_t kc, float* dst) {
  if constexpr (kIsQuantWeight<W>) {
    QuantWidenRows<T, typename W::Format>(p, k, n0, rows, k0, len, kc, dst);
  } else {
    WidenFloatRows<T, W>(p, k, n0, rows, k0, len, kc, dst);
  }
  for (int64_t r = rows; r < rows_pad; ++r) {
    for (int64_t kk = 0; kk < len; ++kk) dst[r * kc + kk] = 0.0f;
  }
}

// The block's sums (kNr rows × kMv vectors of tokens) over k in [0, len), stored to `acc_out`
// (first block) or added to it. xt: panel rows from k0 (stride `panel`); w: kNr converted rows
// (stride kc); acc_out: kNr rows of the y^T accumulator (stride ld). The accumulators start at
// zero rather than at acc_out: gcc keeps them in registers only that way.
template <class T, int kMv, int kNr>
void PanelTile(const float* xt, int64_t panel, const float* w, int64_t kc, int64_t len,
               float* acc_out, int64_t ld, bool first) {
  using V = typename T::V;
  constexpr int kLanes = T::kLanes;
  V acc[kNr][kMv];
#pragma GCC unroll 32
  for (int r = 0; r < kNr; ++r) {
#pragma GCC unroll 32
    for (int v = 0; v < kMv; ++v) acc[r][v] = T::Zero();
  }
  for (int64_t kk = 0; kk < len; ++kk) {
    V xv[kMv];
#pragma GCC unroll 32
    for (int v = 0; v < kMv; ++v) xv[v] = T::LoadX(xt + kk * panel + v * kLanes);
#pragma GCC unroll 32
    for (int r = 0; r < kNr; ++r) {
      const V wv = T::Broadcast(w + r * kc + kk);
#pragma GCC unroll 32
      for (int v = 0; v < kMv; ++v) acc[r][v] = T::Fma(wv, xv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < kNr; ++r) {
#pragma GCC unroll 32
    for (int v = 0; v < kMv; ++v) {
      float* out = acc_out + r * ld + v * kLanes;
      T::Store(out, first ? acc[r][v] : T::Add(acc[r][v], T::LoadX(out)));
    }
  }
}

// y[t * y_stride + j] = acc[j * ld + t] (+ bias[j]) for an 8 × 8 tile: eight accumulator rows
// (weight rows) of eight tokens, so each token's eight outputs leave as one 32-byte store. The
// sums are the scalar write-out's, bit for bit.
inline void WriteTile8x8(const float* acc, int64_t ld, const float* bias, float* y,
                         int64_t y_stride) {
  __m256 r[8], out[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(acc + j * ld);
  Transpose8x8(r, out);
  const __m256 b = bias != nullptr ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) _mm256_storeu_ps(y + t * y_stride, _mm256_add_ps(out[t], b));
}

// y[i, n0 + r] = acc[r][i - m0] (+ bias) for the block's rows and tokens, 8 tokens at a time so
// both the accumulator rows and the 8 rows of y being written stay in L1: whole 8 × 8 tiles
// transposed in registers, the edges one value at a time.
inline void WriteBlock(const MatmulProjection& p, int64_t n0, int64_t rows, int64_t m0, int64_t m1,
                       const float* acc, int64_t ld) {
  for (int64_t i0 = m0; i0 < m1; i0 += 8) {
    const int64_t i1 = MinOf(m1, i0 + 8);
    int64_t r = 0;
    if (i1 - i0 == 8) {
      for (; r + 8 <= rows; r += 8) {
        WriteTile8x8(acc + r * ld + (i0 - m0), ld, p.bias != nullptr ? p.bias + n0 + r : nullptr,
                     p.y + i0 * p.y_stride + n0 + r, p.y_stride);
      }
    }
    for (; r < rows; ++r) {
      const float bias = p.bias != nullptr ? p.bias[n0 + r] : 0.0f;
      for (int64_t i = i0; i < i1; ++i)
        p.y[i * p.y_stride + n0 + r] = acc[r * ld + (i - m0)] + bias;
    }
  }
}

// Prefetches rows [r_begin, r_end) of the weight block at (n0, k0, len) towards L2, so the block
// after the current one arrives while the tiles compute.
template <class W>
void PrefetchBlockRows(const MatmulProjection& p, int64_t k, int64_t n0, int64_t r_begin,
                       int64_t r_end, int64_t k0, int64_t len) {
  int64_t row_bytes, offset, bytes;
  if constexpr (kIsQuantWeight<W>) {
    constexpr DType kDType = W::Format::kDType;
    row_bytes = DTypeRowBytes(kDType, k);
    offset = DTypeRowBytes(kDType, k0);
    bytes = DTypeRowBytes(kDType, len);
  } else {
    constexpr int64_t kSize = sizeof(typename W::Storage);
    row_bytes = k * kSize;
    offset = k0 * kSize;
    bytes = len * kSize;
  }
  const char* base = static_cast<const char*>(p.weight) + offset;
  for (int64_t r = r_begin; r < r_end; ++r) {
    const char* row = base + (n0 + r) * row_bytes;
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 2);
  }
}

// One unit of the rows' work: mc tokens (from m0) × up to nc weight rows (from n0) of one
// projection, with its k blocks in order. Units never share an output element.
struct PanelUnit {
  int32_t projection;
  int64_t m0;
  int64_t n0;
  int64_t rows;
};

// Runs `unit`; `next` (null: none) is the unit this thread expects to run after it, whose first
// block is prefetched during the last k block when it reads the same projection.
template <class T, class W, int kNr>
void RunPanelUnit(const MatmulInput& x, const MatmulProjection& p, const PanelUnit& unit,
                  const PanelUnit* next, const PanelBlocking& b, const PanelWorkspace& ws,
                  int thread) {
  constexpr int64_t kPanel = 2 * T::kLanes;
  float* block = ws.thread_buffers + thread * (ws.block_floats + ws.acc_floats);
  float* acc = block + ws.block_floats;
  const int64_t m0 = unit.m0;
  const int64_t n0 = unit.n0;
  const int64_t m1 = MinOf(x.m, m0 + b.mc);
  const int64_t num_panels = (m1 - m0 + kPanel - 1) / kPanel;
  const int64_t rows = unit.rows;
  const int64_t rows_pad = RoundUp(rows, kNr);
  const bool next_same = next != nullptr && next->projection == unit.projection;
  for (int64_t k0 = 0; k0 < x.k; k0 += b.kc) {
    const int64_t len = MinOf(b.kc, x.k - k0);
    WidenBlock<T, W>(p, x.k, n0, rows, rows_pad, k0, len, b.kc, block);
    // The next block: the next k block, else the next unit's rows from k = 0.
    const bool next_k = k0 + b.kc < x.k;
    const int64_t next_n0 = next_k ? n0 : next_same ? next->n0 : 0;
    const int64_t next_k0 = next_k ? k0 + b.kc : 0;
    const int64_t next_rows = next_k ? rows : next_same ? next->rows : 0;
    const int64_t next_len = MinOf(b.kc, x.k - next_k0);
    for (int64_t i = m0; i < m1; i += kPanel) {
      const int64_t q = (i - m0) / kPanel;
      PrefetchBlockRows<W>(p, x.k, next_n0, q * next_rows / num_panels,
                           (q + 1) * next_rows / num_panels, next_k0, next_len);
      const float* xt = ws.x_panels + (i / kPanel) * kPanel * x.k + k0 * kPanel;
      for (int64_t j = 0; j < rows_pad; j += kNr) {
        float* acc_tile = acc + j * b.mc + (i - m0);
        if (m1 - i > T::kLanes) {
          PanelTile<T, 2, kNr>(xt, kPanel, block + j * b.kc, b.kc, len, acc_tile, b.mc, k0 == 0);
        } else {
          PanelTile<T, 1, kNr>(xt, kPanel, block + j * b.kc, b.kc, len, acc_tile, b.mc, k0 == 0);
        }
      }
    }
  }
  WriteBlock(p, n0, rows, m0, m1, acc, b.mc);
}

// Each thread's units in the order a static split would run them (m0 > n0 within each projection
// of its share of the rows), handed out by WorkClaims.
class PanelSchedule {
 public:
  PanelSchedule(std::span<const MatmulProjection> projections, int64_t m, int64_t unit_rows,
                const PanelBlocking& b, int num_threads)
      : units_(SplitUnits(projections, m, unit_rows, b, num_threads)), claims_(Counts(units_)) {}

  // The next unit for `thread` (null when none is left), and in *next the unit after it in the
  // same list if that is the thread's own and still unclaimed (null otherwise).
  const PanelUnit* Claim(int thread, const PanelUnit** next) {
    int owner = 0;
    int64_t index = 0;
    if (!claims_.Claim(thread, &owner, &index)) return nullptr;
    const std::vector<PanelUnit>& list = units_[static_cast<size_t>(owner)];
    *next = owner == thread && claims_.Unclaimed(owner, index + 1)
                ? &list[static_cast<size_t>(index + 1)]
                : nullptr;
    return &list[static_cast<size_t>(index)];
  }

 private:
  static std::vector<std::vector<PanelUnit>> SplitUnits(
      std::span<const MatmulProjection> projections, int64_t m, int64_t unit_rows,
      const PanelBlocking& b, int num_threads) {
    std::vector<std::vector<PanelUnit>> units(static_cast<size_t>(num_threads));
    const int64_t num_row_units = CountRowUnits(projections, unit_rows);
    for (int t = 0; t < num_threads; ++t) {
      ForEachRowRange(projections, unit_rows, num_row_units * t / num_threads,
                      num_row_units * (t + 1) / num_threads,
                      [&](const MatmulProjection& p, int64_t row_begin, int64_t row_end) {
                        const auto index = static_cast<int32_t>(&p - projections.data());
                        for (int64_t m0 = 0; m0 < m; m0 += b.mc) {
                          for (int64_t n0 = row_begin; n0 < row_end; n0 += b.nc) {
                            units[static_cast<size_t>(t)].push_back(
                                {index, m0, n0, MinOf(b.nc, row_end - n0)});
                          }
                        }
                      });
    }
    return units;
  }
  static std::vector<int64_t> Counts(const std::vector<std::vector<PanelUnit>>& units) {
    std::vector<int64_t> counts;
    for (const std::vector<PanelUnit>& list : units) {
      counts.push_back(static_cast<int64_t>(list.size()));
    }
    return counts;
  }

  std::vector<std::vector<PanelUnit>> units_;
  WorkClaims claims_;
};

// The whole group: pack x^T (one parallel region), then the rows (a second one).
template <class T, int kNr>
void RunPanelGroup(const GroupArgs& args, ThreadPool& pool, const PanelBlocking& b) {
  constexpr int64_t kPanel = 2 * T::kLanes;
  const PanelWorkspace ws = CarvePanelWorkspace(args.workspace, args.x.m, args.x.k, kPanel, b);
  pool.ParallelFor((args.x.m + kPanel - 1) / kPanel, [&](int64_t begin, int64_t end, int) {
    for (int64_t p = begin; p < end; ++p) {
      PackXPanel(args.x, p, kPanel, ws.x_panels + p * kPanel * args.x.k);
    }
  });
  PanelSchedule schedule(args.projections, args.x.m, kNr, b, pool.num_threads());
  pool.RunOnAllThreads([&](int64_t, int64_t, int thread) {
    const PanelUnit* next = nullptr;
    while (const PanelUnit* claimed = schedule.Claim(thread, &next)) {
      const PanelUnit& unit = *claimed;
      const MatmulProjection& p = args.projections[static_cast<size_t>(unit.projection)];
      switch (p.dtype) {
        case DType::kBF16:
          RunPanelUnit<T, Bf16Weight, kNr>(args.x, p, unit, next, b, ws, thread);
          break;
        case DType::kF16:
          RunPanelUnit<T, F16Weight, kNr>(args.x, p, unit, next, b, ws, thread);
          break;
        case DType::kF32:
          RunPanelUnit<T, F32Weight, kNr>(args.x, p, unit, next, b, ws, thread);
          break;
        default:
          WithQuantFormat(p.dtype, [&]<class F>(F) {
            RunPanelUnit<T, QuantWeight<F>, kNr>(args.x, p, unit, next, b, ws, thread);
          });
          break;
      }
    }
  });
}

}  // namespace
}  // namespace loom::cpu::matmul_internal
