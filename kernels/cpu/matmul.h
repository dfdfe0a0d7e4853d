// CPU matrix multiply of the linear layers: y = x · W^T (+ bias), with the weight used in place.
//
//   y[i, j] = sum_k x[i, k] * W[j, k] (+ bias[j])      i < m (tokens), j < n (out_features)
//
// x is f32 activations [m, k]; W is a Hugging Face weight [n, k] (out_features × in_features,
// row-major) in bf16, f16 or f32, or block-quantized (below), read straight from the mmap'd
// checkpoint: any alignment, never repacked or copied as a whole. Two regimes, chosen by m:
//
//   GEMV (decode, small m): bandwidth bound. Each thread streams its own slice of W rows as
//     several long sequential runs read side by side, converts on load and accumulates in f32;
//     every weight row is read from memory once and dotted with all m rows of x.
//   GEMM (prefill, large m): compute bound. With AMX and bf16 weights, W tiles are loaded from the
//     mapping as the A operand of y^T = W · x^T and x is packed into bf16 tiles (split into
//     three bf16 parts that sum to x by default, see MatmulPrecision). Otherwise a cache-blocked FMA kernel: x is
//     packed into token panels and each thread widens small blocks of its weight rows to f32 in
//     the workspace just before broadcasting them against the panels.
//
// Block-quantized weights: DType kQ8_0, kQ4_0, kQ4_1 (blocks of 32 elements) and kQ4_K, kQ5_K,
// kQ6_K (blocks of 256), bit-compatible with GGUF/ggml (layouts in kernels/ref/quant_ref.h). A row
// is DTypeRowBytes(dtype, k) bytes; k must be a whole number of blocks (else kInvalidArgument).
// x stays f32; the weights are dequantized in registers to exactly the values of
// ref::DequantizeRow, so the result is that of an f32 matmul on them up to summation order:
//   GEMV: per group of 32 elements of a weight row the integers are widened to f32, scaled and
//     biased in registers (matmul_quant_inl.h), then dotted with every x row of the tile. The
//     scales of a block are unpacked once per block and weight row. Every weight byte is read once.
//     With one x row on AVX2 the scale and bias are applied to the group's sums instead (the
//     same value up to f32 rounding, ~1e-7 relative; fewer instructions per weight).
//   GEMM: the panel kernel, its per-thread weight block dequantized to f32 (the FMA panels on
//     AVX2 / AVX-512; with AMX, quantized groups run the AVX-512 panel GEMM, not the tiles).
//   Scalar: each block dequantized by the reference decoder, then dotted.
// Formats may differ between the projections of one group (q4_k next to q6_k, or a float weight).
// A group with a quantized weight takes the GEMV up to MatmulQuantGemvMaxM rows, not
// MatmulGemvMaxM: with f32 x the quantized GEMV costs several instructions per weight and x row
// and loses to the dequantize-to-panel GEMM from a few rows on (bench/results/cpu_matmul_quant.md).
//
// int8 activations (opt-in, MatmulOptions::quant_activations = QuantActivations::kInt8): on the
// GEMV path of the AVX2 / AVX-512 / AMX levels, every x row is quantized once per call to signed
// bytes, one f32 scale per 32 elements for q8_0 / q4_0 / q4_1 and per 256 for the k-quants
// (d = max|x| / 127, q = round(x / d)), and the quantized weights are dotted with it in integer
// arithmetic (vpmaddubsw / vpmaddwd), one f32 scale multiply per block (matmul_int8_inl.h). All six
// formats have such a kernel; float weights of the group keep the f32 GEMV; the GEMM path and the
// scalar level ignore the setting (f32 x). The weights are still exact; the error is x's rounding,
// at most max|x| / 254 of the x block per element, so per output
//   |y_int8 - y_f32| <= sum over blocks of (max_block |x| / 254) * sum_block |w|.
// Measured (tests/kernels/quant_matmul_test.cc, Int8ErrorOnRealisticData): x ~ N(0, 1) and
// weights quantized from N(0, 1/k), k = 2048, the relative RMS error of y against the f32 path is
// 0.54 % for the 32-element formats and 0.74 % for the k-quants (a larger x block, so a coarser
// d), against the f32 path on the same quantized weights.
//
// The group form runs several weights that share x (q/k/v, gate/up) together: their rows are
// concatenated and split evenly over the threads in one parallel region.
//
// Accuracy: quantized weights as above (exact dequantized weights, f32 sums); the FMA paths
// multiply exactly (bf16/f16 weights widen to f32 exactly) and accumulate
// in f32, so they match the f32 reference up to summation order (~1e-6 of sum_k |x·w|). The AMX
// default (x split into three bf16 parts) multiplies exactly as well; the explicit
// MatmulPrecision::kBf16 rounds x to bf16 (up to ~4e-3 of sum_k |x·w|). With the default
// precision a token's output does not depend on the batch (and so the path) it is computed in
// beyond f32 summation order (~1e-6 relative), with one exception seen on a real AMX machine:
// the tile sums drift further from the FMA paths' than the matmul tests (1e-5 of sum_k |x·w|)
// show, enough to move a prompt logprob of a golden model by 1.6e-3 when one prompt ran on the
// tiles and the other on the GEMV (not yet explained; MatmulGemvMaxM keeps batches of 5 or
// more rows on the tiles).
//
// Threading: call from one thread at a time per ThreadPool (the pool's rule). No allocation, no
// logging; the GEMM paths take a caller-provided workspace (MatmulWorkspaceBytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "kernels/common/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace loom::cpu {

// The activations: x [m, k] f32, row stride `stride` elements (>= k).
struct MatmulInput {
  const float* data = nullptr;
  int64_t m = 0;
  int64_t k = 0;
  int64_t stride = 0;
};

// One weight and the output it produces: y [m, n] = x · weight^T (+ bias).
struct MatmulProjection {
  const void* weight = nullptr;  // [n, k] row-major, rows packed (DTypeRowBytes(dtype, k) bytes
                                 // each); any alignment
  DType dtype = DType::kBF16;    // kBF16, kF16, kF32, or a block-quantized format (kQ8_0 ...)
  int64_t n = 0;
  const float* bias = nullptr;  // [n] f32, or nullptr
  float* y = nullptr;           // [m, n] f32, row stride y_stride (>= n); must not overlap x
  int64_t y_stride = 0;
};

// How x may be rounded on the way into bf16 arithmetic. The AMX GEMM path uses it, and so do the
// AVX-512 GEMM of bf16 weights and their GEMV for m = 1 at kBf16 (vdpbf16ps dot products, twice
// the multiply-adds of an f32 FMA per instruction and no widening of the weights; kHighest keeps
// the f32 FMA kernels there). At kBf16 the AVX-512 / AMX GEMM of block-quantized weights takes
// the same vdpbf16ps tiles, with the exactly dequantized weights rounded to bf16 as well (~2^-9
// relative per weight, like x's rounding). Every other path computes with f32 x (as accurate as
// kHighest or more).
enum class MatmulPrecision : uint8_t {
  // x = x_hi + x_mid + x_lo, all bf16 (each the bf16 rounding of what the parts before leave),
  // which is x exactly for normal values: three bf16 products per weight into one f32
  // accumulator, each exact, so f32 accuracy. The default.
  kHighest,
  // x rounded to bf16 once: a third of the tile work of kHighest, ~2^-9 relative error per
  // product.
  kBf16,
};

// Which loop nest runs. kAuto picks by m (see ChooseMatmulPath); tests and benchmarks force one.
enum class MatmulPath : uint8_t { kAuto, kGemv, kGemm };

enum class MatmulStatus : uint8_t {
  kOk,
  kInvalidArgument,    // null pointer, bad size or stride, unsupported dtype, k not whole blocks
  kWorkspaceTooSmall,  // workspace_bytes < MatmulWorkspaceBytes(...)
  kUnsupportedIsa,     // options.isa is above what this CPU supports
};

// How the GEMV of block-quantized weights treats x (see the top of this file).
enum class QuantActivations : uint8_t {
  kF32,   // x stays f32: exact up to summation order. The default.
  kInt8,  // x quantized to int8 blocks, integer dot products: ~0.5 % relative error, several
          // times faster where the f32 path is compute bound (4- to 6-bit formats).
};

// How the f32 GEMV of float weights (the default precision) reads its weight rows: how many runs
// of rows each thread walks side by side, and how far ahead of them it prefetches. The faster
// layout differs between CPUs, so each is named for the machine it was measured best on
// (bench/results/cpu_matmul.md, "GEMV streams per CPU"); every layout of a level gives the same
// sums in the same order.
enum class GemvLayout : uint8_t {
  kAuto,  // the CPU's measured choice: kZen4 on AMD parts, kSapphireRapids on the others
  // AVX-512 / AMX: 6 runs per thread; none prefetched at m = 1, 2 KiB ahead into L2 from m = 2.
  // AVX2: 4 runs (3 from m = 4) as kSapphireRapids, prefetched 2 KiB ahead into L2 from m = 2.
  kZen4,
  // AVX-512 / AMX: 8 runs per thread up to m = 3 and 6 from m = 4, 512 B ahead into L1.
  // AVX2: 4 runs (3 from m = 4), no software prefetch (as measured on Zen 3 before kZen4).
  kSapphireRapids,
};

struct MatmulOptions {
  MatmulPrecision precision = MatmulPrecision::kHighest;
  MatmulPath path = MatmulPath::kAuto;
  // The instruction set to run; unset means SelectedIsa() (which honours LOOM_CPU_ISA).
  std::optional<Isa> isa;
  QuantActivations quant_activations = QuantActivations::kF32;
  GemvLayout gemv_layout = GemvLayout::kAuto;
};

// Largest m that MatmulPath::kAuto runs as a GEMV on `isa`; larger m runs the GEMM path.
int64_t MatmulGemvMaxM(Isa isa);

// Largest m that MatmulPath::kAuto runs as a GEMV on `isa` for a block-quantized weight of
// `dtype`, with x in the given form; a group takes the smallest limit of its quantized weights.
int64_t MatmulQuantGemvMaxM(Isa isa, DType dtype, QuantActivations quant_activations);

// The path a call with these options takes for x with m rows and float weights only.
MatmulPath ChooseMatmulPath(int64_t m, const MatmulOptions& options = {});

// The path a call with these options takes for x with m rows and these weights (the quantized
// limit when any of them is block-quantized).
MatmulPath ChooseMatmulPath(int64_t m, std::span<const MatmulProjection> projections,
                            const MatmulOptions& options = {});

// Bytes of workspace a call with x of [m, k] on a pool of `num_threads` needs (0 when the chosen
// path needs none). Valid for any group of weights sharing that x, float or quantized (the larger
// of what the paths the two kinds take need: the GEMM panels, or with QuantActivations::kInt8 the
// quantized x of the GEMV).
size_t MatmulWorkspaceBytes(int64_t m, int64_t k, int num_threads,
                            const MatmulOptions& options = {});

// y = x · weight^T (+ bias) for one weight. `workspace` may be null when MatmulWorkspaceBytes is 0.
MatmulStatus Matmul(const MatmulInput& x, const MatmulProjection& projection, ThreadPool& pool,
                    void* workspace, size_t workspace_bytes, const MatmulOptions& options = {});

// The same for several weights sharing x: their rows are split over the threads as one range, in
// one parallel region (the GEMM paths add one before it to pack x). Outputs must not overlap.
MatmulStatus MatmulGroup(const MatmulInput& x, std::span<const MatmulProjection> projections,
                         ThreadPool& pool, void* workspace, size_t workspace_bytes,
                         const MatmulOptions& options = {});

std::string_view MatmulStatusName(MatmulStatus status);

}  // namespace loom::cpu
