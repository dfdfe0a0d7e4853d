// The FMA matmul, written once over a vector type and instantiated by each instruction-set file
// (matmul_scalar.cc, matmul_avx2.cc, matmul_avx512.cc) with that file's vector traits.
//
// Math: y[i, j] = sum_k x[i, k] * W[j, k] (+ bias[j]). Both operands are contiguous along k, so
// the microkernel is a block of dot products: a tile of kMr rows of x by kNr rows of W keeps
// kMr * kNr vector accumulators (lanes along k), loads kMr x vectors and kNr weight vectors per
// step (weights widened to f32 on load: bf16 by a 16-bit shift, f16 by vcvtph2ps) and sums the
// lanes at the end. Products are exact and sums are f32.
//
// Work split: the rows of all weights of a group are cut into units of kNr rows; thread t gets a
// contiguous run of units (its own weight rows, its own y columns, no write sharing). The GEMV
// cuts that run into pieces (GemvStealPieces) and a thread that finishes early takes the last
// pieces of another's; a row's sum is the same wherever it runs.
//
// GEMV order (RunGemvRows, the decode path): a thread's rows are cut into kNr equal runs and a
// tile takes one row from each, with all of k and all m rows of x (in chunks of kMr, the weight
// rows staying in L1 in between). Each weight byte is read from DRAM once, as kNr long sequential
// streams per thread; x (m * k * 4 bytes) stays in cache.
//
// Blocked order (RunBlockedRows: the scalar GEMM and the AVX-512 rows the AMX tiles leave):
//   m0 (mc rows of x) > k0 (kc) > n0 (nc weight rows) > i (kMr x rows) > j (kNr weight rows)
// The kMr x rows of kc stay in L1 while j walks nc weight rows of kc, which stay in L2 while i
// walks mc; the weight is read from memory once per mc rows of x.
//
// The loops over tile dimensions carry `#pragma GCC unroll`: without it gcc -O3 keeps the
// accumulator arrays in memory and stores them on every step.
//
// Block-quantized weights: the traits provide T::QuantRows(x, projection, row_begin, row_end),
// the whole product over those rows on the calling thread (matmul_quant_inl.h on AVX2/AVX-512, a
// dequantize-and-dot loop on scalar); both orders above hand quantized projections to it.
//
// Everything is in an unnamed namespace on purpose: each including file compiles these templates
// with different instruction-set flags, and no instantiation may be shared between them by the
// linker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/dtype.h"
#include "kernels/cpu/matmul_internal.h"

namespace loom::cpu::matmul_internal {
namespace {

// Weight element types: storage and how the traits widen them.
struct Bf16Weight {
  using Storage = uint16_t;
};
struct F16Weight {
  using Storage = uint16_t;
};
struct F32Weight {
  using Storage = float;
};

// Blocked loop-nest sizes (see the file comment).
struct FmaBlocking {
  int64_t mc;
  int64_t kc;
  int64_t nc;
};

template <typename T>
constexpr T MinOf(T a, T b) {
  return a < b ? a : b;
}

// acc[a][r] += x[a] . w[r] over [k, k + kLanes) (or a partial last vector of `count` lanes).
template <class T, class W, int kMr, int kNr, bool kPartial>
inline void DotStep(const float* const* x_rows, const typename W::Storage* const* w_rows, int64_t k,
                    int count, typename T::V (&acc)[kMr][kNr]) {
  using V = typename T::V;
  V xv[kMr];
#pragma GCC unroll 32
  for (int a = 0; a < kMr; ++a) {
    xv[a] = kPartial ? T::LoadXPartial(x_rows[a] + k, count) : T::LoadX(x_rows[a] + k);
  }
#pragma GCC unroll 32
  for (int r = 0; r < kNr; ++r) {
    const V wv = kPartial ? T::template LoadWPartial<W>(w_rows[r] + k, count)
                          : T::template LoadW<W>(w_rows[r] + k);
#pragma GCC unroll 32
    for (int a = 0; a < kMr; ++a) acc[a][r] = T::Fma(xv[a], wv, acc[a][r]);
  }
}

// out[a * kNr + r] = sum_{k < len} x_rows[a][k] * w_rows[r][k]. kPrefetchBytes > 0: each weight
// row is prefetched that many bytes ahead into L1 (T::Prefetch); < 0: -kPrefetchBytes ahead into
// L2 (T::PrefetchL2); 0: not at all.
template <class T, class W, int kMr, int kNr, int kPrefetchBytes>
inline void DotTile(const float* const* x_rows, const typename W::Storage* const* w_rows,
                    int64_t len, float* out) {
  using V = typename T::V;
  using S = typename W::Storage;
  constexpr int kLanes = T::kLanes;
  // One 64-byte line of each weight row per iteration, so one prefetch per row per iteration.
  constexpr int kUnroll =
      64 / static_cast<int>(sizeof(S)) / kLanes > 0 ? 64 / static_cast<int>(sizeof(S)) / kLanes : 1;
  V acc[kMr][kNr];
#pragma GCC unroll 32
  for (int a = 0; a < kMr; ++a) {
#pragma GCC unroll 32
    for (int r = 0; r < kNr; ++r) acc[a][r] = T::Zero();
  }
  int64_t k = 0;
  for (; k + kUnroll * kLanes <= len; k += kUnroll * kLanes) {
    if constexpr (kPrefetchBytes > 0) {
#pragma GCC unroll 32
      for (int r = 0; r < kNr; ++r) {
        T::Prefetch(reinterpret_cast<const char*>(w_rows[r] + k) + kPrefetchBytes);
      }
    } else if constexpr (kPrefetchBytes < 0) {
#pragma GCC unroll 32
      for (int r = 0; r < kNr; ++r) {
        T::PrefetchL2(reinterpret_cast<const char*>(w_rows[r] + k) - kPrefetchBytes);
      }
    }
#pragma GCC unroll 32
    for (int u = 0; u < kUnroll; ++u) {
      DotStep<T, W, kMr, kNr, false>(x_rows, w_rows, k + u * kLanes, kLanes, acc);
    }
  }
  for (; k + kLanes <= len; k += kLanes) {
    DotStep<T, W, kMr, kNr, false>(x_rows, w_rows, k, kLanes, acc);
  }
  if (k < len) {
    DotStep<T, W, kMr, kNr, true>(x_rows, w_rows, k, static_cast<int>(len - k), acc);
  }
#pragma GCC unroll 32
  for (int a = 0; a < kMr; ++a) {
#pragma GCC unroll 32
    for (int r = 0; r < kNr; ++r) out[a * kNr + r] = T::ReduceAdd(acc[a][r]);
  }
}

// The weight rows of one tile: first, first + step, ..., up to kNr of them; rows at or past `end`
// are computed on a repeat of `first` (never read out of bounds) and not stored.
struct TileRows {
  int64_t first;
  int64_t step;
  int64_t end;
  int64_t row(int r) const { return first + r * step < end ? first + r * step : first; }
  bool valid(int r) const { return first + r * step < end; }
};

// One tile: x rows [i, i + kMr) by `rows`, k in [k0, k0 + len). The first k block assigns y
// (+ bias); later blocks add to it.
template <class T, class W, int kMr, int kNr, int kPrefetchBytes>
void RunTile(const MatmulInput& x, const MatmulProjection& p, int64_t i, const TileRows& rows,
             int64_t k0, int64_t len) {
  using S = typename W::Storage;
  const S* w = static_cast<const S*>(p.weight);
  const float* x_rows[kMr];
  const S* w_rows[kNr];
#pragma GCC unroll 32
  for (int a = 0; a < kMr; ++a) x_rows[a] = x.data + (i + a) * x.stride + k0;
#pragma GCC unroll 32
  for (int r = 0; r < kNr; ++r) w_rows[r] = w + rows.row(r) * x.k + k0;
  float out[kMr * kNr];
  DotTile<T, W, kMr, kNr, kPrefetchBytes>(x_rows, w_rows, len, out);
#pragma GCC unroll 32
  for (int a = 0; a < kMr; ++a) {
    float* y = p.y + (i + a) * p.y_stride;
    for (int r = 0; r < kNr && rows.valid(r); ++r) {
      const int64_t n = rows.row(r);
      if (k0 != 0) {
        y[n] += out[a * kNr + r];
      } else {
        y[n] = p.bias != nullptr ? out[a * kNr + r] + p.bias[n] : out[a * kNr + r];
      }
    }
  }
}

// RunTile with the row count mr <= kMrMax chosen at run time.
template <class T, class W, int kMrMax, int kNr, int kPrefetchBytes>
void RunTileRows(int mr, const MatmulInput& x, const MatmulProjection& p, int64_t i,
                 const TileRows& rows, int64_t k0, int64_t len) {
  if (mr == kMrMax) {
    RunTile<T, W, kMrMax, kNr, kPrefetchBytes>(x, p, i, rows, k0, len);
  } else if constexpr (kMrMax > 1) {
    RunTileRows<T, W, kMrMax - 1, kNr, kPrefetchBytes>(mr, x, p, i, rows, k0, len);
  }
}

// GEMV order over weight rows [row_begin, row_end): the rows are cut into kNr equal runs walked
// side by side, so a tile's kNr rows lie far apart and each run is read front to back. That gives
// kNr long sequential streams, as in the multi-stream read roofline, where kNr adjacent rows
// would be kNr short streams that restart the hardware prefetchers at every row. Each tile takes
// all of k and all m rows of x (in chunks of kMrMax, the weight rows staying in L1 meanwhile).
template <class T, class W, int kMrMax, int kNr, int kPrefetchBytes>
void RunGemvRows(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin,
                 int64_t row_end) {
  const int64_t step = (row_end - row_begin + kNr - 1) / kNr;
  for (int64_t j = 0; j < step; ++j) {
    const TileRows rows{row_begin + j, step, row_end};
    for (int64_t i = 0; i < x.m; i += kMrMax) {
      const int mr = static_cast<int>(MinOf<int64_t>(kMrMax, x.m - i));
      RunTileRows<T, W, kMrMax, kNr, kPrefetchBytes>(mr, x, p, i, rows, 0, x.k);
    }
  }
}

// Blocked order over weight rows [row_begin, row_end) (see the file comment).
template <class T, class W, int kMrMax, int kNr>
void RunBlockedRows(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin,
                    int64_t row_end, const FmaBlocking& b) {
  for (int64_t m0 = 0; m0 < x.m; m0 += b.mc) {
    const int64_t m1 = MinOf(x.m, m0 + b.mc);
    for (int64_t k0 = 0; k0 < x.k; k0 += b.kc) {
      const int64_t len = MinOf(x.k, k0 + b.kc) - k0;
      for (int64_t n0 = row_begin; n0 < row_end; n0 += b.nc) {
        const int64_t n1 = MinOf(row_end, n0 + b.nc);
        for (int64_t i = m0; i < m1; i += kMrMax) {
          const int mr = static_cast<int>(MinOf<int64_t>(kMrMax, m1 - i));
          for (int64_t j = n0; j < n1; j += kNr) {
            RunTileRows<T, W, kMrMax, kNr, 0>(mr, x, p, i, TileRows{j, 1, n1}, k0, len);
          }
        }
      }
    }
  }
}

// Calls fn(W{}) with the weight type tag of `dtype`.
template <typename Fn>
void WithWeightType(DType dtype, const Fn& fn) {
  switch (dtype) {
    case DType::kBF16:
      return fn(Bf16Weight{});
    case DType::kF16:
      return fn(F16Weight{});
    default:
      return fn(F32Weight{});
  }
}

// The GEMV over weight rows [row_begin, row_end) of one projection on the calling thread.
// Block-quantized weights go to the traits' own kernel, T::QuantRows (matmul_quant_inl.h).
template <class T, int kMrMax, int kNr, int kPrefetchBytes>
void GemvProjectionRows(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin,
                        int64_t row_end) {
  if (IsQuantizedDType(p.dtype)) return T::QuantRows(x, p, row_begin, row_end);
  WithWeightType(p.dtype, [&]<class W>(W) {
    RunGemvRows<T, W, kMrMax, kNr, kPrefetchBytes>(x, p, row_begin, row_end);
  });
}

// The blocked dot-product GEMM over weight rows [row_begin, row_end) of one projection.
template <class T, int kMrMax, int kNr>
void BlockedProjectionRows(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin,
                           int64_t row_end, const FmaBlocking& b) {
  if (IsQuantizedDType(p.dtype)) return T::QuantRows(x, p, row_begin, row_end);
  WithWeightType(
      p.dtype, [&]<class W>(W) { RunBlockedRows<T, W, kMrMax, kNr>(x, p, row_begin, row_end, b); });
}

// The GEMV of a whole group on the pool: units of kNr rows, one contiguous run per thread.
template <class T, int kMrMax, int kNr, int kPrefetchBytes>
void RunGemvGroup(const GroupArgs& args, ThreadPool& pool) {
  const int64_t num_units = CountRowUnits(args.projections, kNr);
  ParallelForStealing(pool, num_units, GemvStealPieces(args, pool.num_threads()),
                      [&](int64_t unit_begin, int64_t unit_end) {
    ForEachRowRange(args.projections, kNr, unit_begin, unit_end,
                    [&](const MatmulProjection& p, int64_t row_begin, int64_t row_end) {
                      GemvProjectionRows<T, kMrMax, kNr, kPrefetchBytes>(args.x, p, row_begin,
                                                                         row_end);
                    });
  });
}

// The blocked dot-product GEMM of a whole group (the scalar level's GEMM).
template <class T, int kMrMax, int kNr>
void RunBlockedGroup(const GroupArgs& args, ThreadPool& pool, const FmaBlocking& b) {
  const int64_t num_units = CountRowUnits(args.projections, kNr);
  pool.ParallelFor(num_units, [&](int64_t unit_begin, int64_t unit_end, int /*thread*/) {
    ForEachRowRange(args.projections, kNr, unit_begin, unit_end,
                    [&](const MatmulProjection& p, int64_t row_begin, int64_t row_end) {
                      BlockedProjectionRows<T, kMrMax, kNr>(args.x, p, row_begin, row_end, b);
                    });
  });
}

}  // namespace
}  // namespace loom::cpu::matmul_internal
