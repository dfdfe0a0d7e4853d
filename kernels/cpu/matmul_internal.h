// Internal interface between the matmul dispatcher (matmul.cc) and its per-ISA implementations
// (matmul_scalar.cc, matmul_avx2.cc, matmul_avx512.cc, matmul_amx.cc). Not for callers outside
// kernels/cpu: use kernels/cpu/matmul.h.
//
// Every function here receives arguments that matmul.cc has already validated: m, k >= 1, every
// projection has n >= 0, a float dtype or a block-quantized one whose blocks tile k, and non-null
// pointers, and the workspace is large enough.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/work_claims.h"

namespace loom::cpu::matmul_internal {

// One validated call.
struct GroupArgs {
  MatmulInput x;
  std::span<const MatmulProjection> projections;
  MatmulPrecision precision = MatmulPrecision::kHighest;
  QuantActivations quant_activations = QuantActivations::kF32;
  void* workspace = nullptr;  // MatmulWorkspaceBytes(...) bytes, no alignment promised
  size_t workspace_bytes = 0;
  GemvLayout gemv_layout = GemvLayout::kSapphireRapids;  // resolved: never kAuto
};

// Entry points of each instruction-set level. Gemv* walk weight rows with the whole of x per row
// group (small m, matmul_dot_inl.h); Gemm* block for cache reuse (large m; the panel kernel of
// matmul_panel_inl.h on AVX2/AVX-512, the dot kernel on scalar, tiles on AMX).
void GemvScalar(const GroupArgs& args, ThreadPool& pool);
void GemmScalar(const GroupArgs& args, ThreadPool& pool);
void GemvAvx2(const GroupArgs& args, ThreadPool& pool);
void GemmAvx2(const GroupArgs& args, ThreadPool& pool);
void GemvAvx512(const GroupArgs& args, ThreadPool& pool);
void GemmAvx512(const GroupArgs& args, ThreadPool& pool);
// Workspace of the panel GEMMs (x^T panels and per-thread blocks, matmul_panel_inl.h).
size_t GemmAvx2WorkspaceBytes(int64_t m, int64_t k, int num_threads);
size_t GemmAvx512WorkspaceBytes(int64_t m, int64_t k, int num_threads);
// bf16 weights on the tile unit (all projections must be bf16; the dispatcher sends other groups
// to GemmAvx512); rows past the last full 16 of each weight go through GemmRowsAvx512. Uses the
// workspace (GemmAmxWorkspaceBytes).
void GemmAmx(const GroupArgs& args, ThreadPool& pool);
size_t GemmAmxWorkspaceBytes(int64_t m, int64_t k, int num_threads, MatmulPrecision precision);

// The AVX512-BF16 GEMM (matmul_bf16dot_avx512.cc): vdpbf16ps on bf16 weights and bf16-rounded x.
// It applies when the precision is kBf16 and every projection is bf16 or block-quantized (those
// weights dequantized exactly, then rounded to bf16 as they are packed). Its workspace
// (GemmBf16DotAvx512WorkspaceBytes) is part of what the dispatcher reserves on the AVX-512 and
// AMX levels.
bool GemmBf16DotAvx512Applies(const GroupArgs& args);
void GemmBf16DotAvx512(const GroupArgs& args, ThreadPool& pool);
size_t GemmBf16DotAvx512WorkspaceBytes(int64_t m, int64_t k, int num_threads);
// Its GEMV (the same file): precision kBf16, every projection bf16, m <= GemvBf16DotMaxM() (1).
// The workspace holds x rounded to bf16 (GemvBf16DotAvx512WorkspaceBytes).
int64_t GemvBf16DotMaxM();
bool GemvBf16DotAvx512Applies(const GroupArgs& args);
void GemvBf16DotAvx512(const GroupArgs& args, ThreadPool& pool);
size_t GemvBf16DotAvx512WorkspaceBytes(int64_t m, int64_t k);

// dst[r * ld + kk] = the block-quantized weight p at (n0 + r, k0 + kk) in f32, exactly as
// ref::DequantizeRow, for r < rows and kk < len (k0 and len whole blocks of p's format);
// AVX-512 code (matmul_avx512.cc), for the vdpbf16ps GEMM's weight packing.
void QuantWidenRowsAvx512(const MatmulProjection& p, int64_t k, int64_t n0, int64_t rows,
                          int64_t k0, int64_t len, int64_t ld, float* dst);

// The AVX-512 dot-product kernel over weight rows [row_begin, row_end) of one projection on the
// calling thread, no workspace; the AMX path hands it the rows its tiles do not cover.
void GemmRowsAvx512(const MatmulInput& x, const MatmulProjection& projection, int64_t row_begin,
                    int64_t row_end);

// The quantized x of the int8 GEMV (matmul_int8_inl.h): per x row, k / 32 blocks of 32 elements
// (f32 scale, int32 sum, 32 bytes) and, where k is a multiple of 256, k / 256 blocks of 256 (f32
// scale, 16 int16 sums, 256 bytes); then the f32 dx sum of each 32-element block for m rounded up
// to 4 rows; 64 bytes to align the start.
inline constexpr size_t kInt8XBlock32Bytes = 40;
inline constexpr size_t kInt8XBlock256Bytes = 292;
inline size_t Int8XWorkspaceBytes(int64_t m, int64_t k) {
  size_t bytes = 64 + static_cast<size_t>(m * (k / 32)) * kInt8XBlock32Bytes;
  if (k % 256 == 0) bytes += static_cast<size_t>(m * (k / 256)) * kInt8XBlock256Bytes;
  bytes += static_cast<size_t>((m + 3) / 4 * 4 * (k / 32)) * sizeof(float);
  return bytes;
}

// How many pieces each thread's share of a GEMV's rows is cut into (ParallelForStealing): a
// thread that finishes its share takes the last pieces of another's. A decode step is a chain of
// GEMVs, each ending in a wait for its slowest thread, and on a shared host one vCPU is often
// slower than the other for a while. Engine decode of the 1.1B shape on two threads of a Zen 4
// guest, static split -> 8 pieces, alternated rounds: 13.4-14.9 -> 14.4-17.5 tok/s with
// --fast-bf16-matmul, 12.7-14.4 -> 15.3-16.1 at the default precision; batch 8 level within
// noise (bench/results/cpu_matmul.md). A piece holds at least kGemvMinPieceBytes of weights: a
// shorter one would cut the runs a thread reads side by side into streams too short for the
// hardware prefetchers, so a small group keeps the static split.
inline constexpr int64_t kGemvStealPieces = 8;
inline constexpr int64_t kGemvMinPieceBytes = int64_t{256} << 10;

// How many pieces ParallelForStealing cuts each thread's share of this GEMV group into (1 to
// kGemvStealPieces, from the group's weight bytes).
int64_t GemvStealPieces(const GroupArgs& args, int num_threads);

// A group's rows are cut into units of `unit_rows` rows (the last unit of each projection may be
// shorter); units are numbered through the projections in order. Threads get contiguous runs
// (the GEMVs cut them into pieces that another thread may take: GemvStealPieces).
int64_t CountRowUnits(std::span<const MatmulProjection> projections, int64_t unit_rows);

// Calls fn(projection, row_begin, row_end) for each projection that units [unit_begin, unit_end)
// touch, with that projection's rows among them.
template <typename Fn>
void ForEachRowRange(std::span<const MatmulProjection> projections, int64_t unit_rows,
                     int64_t unit_begin, int64_t unit_end, const Fn& fn) {
  int64_t first_unit = 0;  // global number of the projection's first unit
  for (const MatmulProjection& projection : projections) {
    const int64_t num_units = (projection.n + unit_rows - 1) / unit_rows;
    const int64_t begin = unit_begin > first_unit ? unit_begin - first_unit : 0;
    const int64_t end = unit_end - first_unit < num_units ? unit_end - first_unit : num_units;
    if (begin < end) {
      const int64_t row_end = end * unit_rows < projection.n ? end * unit_rows : projection.n;
      fn(projection, begin * unit_rows, row_end);
    }
    first_unit += num_units;
    if (first_unit >= unit_end) break;
  }
}

}  // namespace loom::cpu::matmul_internal
