// Matmul dispatch: validates a call, picks the instruction set (options.isa or SelectedIsa()) and
// the path (GEMV for m <= MatmulGemvMaxM(isa), or MatmulQuantGemvMaxM with a quantized weight;
// GEMM above), and calls that level's entry point in
// matmul_{scalar,avx2,avx512,amx}.cc.
#include "kernels/cpu/matmul.h"

#include <algorithm>

#include "kernels/cpu/matmul_internal.h"

namespace loom::cpu {
namespace {

using matmul_internal::GroupArgs;

Isa ThisCpuMaxIsa() {
  static const Isa max_isa = MaxIsa(DetectCpuFeatures());
  return max_isa;
}

Isa ResolveIsa(const MatmulOptions& options) { return options.isa.value_or(SelectedIsa()); }

GemvLayout ResolveGemvLayout(GemvLayout layout) {
  if (layout != GemvLayout::kAuto) return layout;
  static const GemvLayout machine = DetectCpuFeatures().vendor == CpuVendor::kAmd
                                        ? GemvLayout::kZen4
                                        : GemvLayout::kSapphireRapids;
  return machine;
}

bool ValidInput(const MatmulInput& x) {
  if (x.m < 0 || x.k < 0) return false;
  if (x.m > 0 && x.k > 0 && (x.data == nullptr || x.stride < x.k)) return false;
  return true;
}

bool ValidProjection(const MatmulProjection& p, const MatmulInput& x) {
  if (p.n < 0) return false;
  if (!IsFloatDType(p.dtype) && !(IsQuantizedDType(p.dtype) && RowFitsBlocks(p.dtype, x.k))) {
    return false;
  }
  if (p.n == 0 || x.m == 0) return true;
  if (p.y == nullptr || p.y_stride < p.n) return false;
  return x.k == 0 || p.weight != nullptr;
}

// k == 0: the sums are empty, y is the bias (or zero).
void WriteBiasOnly(const MatmulInput& x, std::span<const MatmulProjection> projections) {
  for (const MatmulProjection& p : projections) {
    for (int64_t i = 0; i < x.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) p.y[i * p.y_stride + j] = p.bias ? p.bias[j] : 0.0f;
    }
  }
}

// The tile path multiplies bf16 weights only; a group with other dtypes runs the AVX-512 GEMM.
bool AllBf16(std::span<const MatmulProjection> projections) {
  for (const MatmulProjection& p : projections) {
    if (p.dtype != DType::kBF16) return false;
  }
  return true;
}

// The AVX-512 GEMV: vdpbf16ps where it applies (kBf16, bf16 weights, m = 1), the
// f32 FMA kernel otherwise.
void Bf16DotGemv(const GroupArgs& args, ThreadPool& pool) {
  if (matmul_internal::GemvBf16DotAvx512Applies(args)) {
    return matmul_internal::GemvBf16DotAvx512(args, pool);
  }
  matmul_internal::GemvAvx512(args, pool);
}

void Run(Isa isa, MatmulPath path, const GroupArgs& args, ThreadPool& pool) {
  namespace mi = matmul_internal;
  const bool gemv = path == MatmulPath::kGemv;
  switch (isa) {
    case Isa::kScalar:
      return gemv ? mi::GemvScalar(args, pool) : mi::GemmScalar(args, pool);
    case Isa::kAvx2:
      return gemv ? mi::GemvAvx2(args, pool) : mi::GemmAvx2(args, pool);
    case Isa::kAvx512:
      if (gemv) return Bf16DotGemv(args, pool);
      return mi::GemmBf16DotAvx512Applies(args) ? mi::GemmBf16DotAvx512(args, pool)
                                                 : mi::GemmAvx512(args, pool);
    case Isa::kAmx:
      if (gemv) return Bf16DotGemv(args, pool);
      if (AllBf16(args.projections)) return mi::GemmAmx(args, pool);
      return mi::GemmBf16DotAvx512Applies(args) ? mi::GemmBf16DotAvx512(args, pool)
                                                 : mi::GemmAvx512(args, pool);
  }
}

// Workspace of the GEMM path on `isa` (the GEMV paths and the scalar GEMM need none).
size_t GemmWorkspaceBytes(Isa isa, int64_t m, int64_t k, int num_threads,
                          MatmulPrecision precision) {
  namespace mi = matmul_internal;
  switch (isa) {
    case Isa::kScalar:
      return 0;
    case Isa::kAvx2:
      return mi::GemmAvx2WorkspaceBytes(m, k, num_threads);
    case Isa::kAvx512: {
      const size_t fma = mi::GemmAvx512WorkspaceBytes(m, k, num_threads);
      const size_t dot = mi::GemmBf16DotAvx512WorkspaceBytes(m, k, num_threads);
      return fma > dot ? fma : dot;
    }
    case Isa::kAmx: {
      // The dtype is not known here: enough for the tiles and for the AVX-512 fallbacks (the
      // vdpbf16ps GEMM takes quantized groups at kBf16).
      const size_t amx = mi::GemmAmxWorkspaceBytes(m, k, num_threads, precision);
      const size_t fma = mi::GemmAvx512WorkspaceBytes(m, k, num_threads);
      const size_t dot = mi::GemmBf16DotAvx512WorkspaceBytes(m, k, num_threads);
      return std::max({amx, fma, dot});
    }
  }
  return 0;
}

}  // namespace

namespace matmul_internal {

int64_t CountRowUnits(std::span<const MatmulProjection> projections, int64_t unit_rows) {
  int64_t units = 0;
  for (const MatmulProjection& p : projections) units += (p.n + unit_rows - 1) / unit_rows;
  return units;
}

int64_t GemvStealPieces(const GroupArgs& args, int num_threads) {
  int64_t bytes = 0;
  for (const MatmulProjection& p : args.projections) {
    bytes += p.n * DTypeRowBytes(p.dtype, args.x.k);
  }
  const int64_t pieces = bytes / num_threads / kGemvMinPieceBytes;
  return pieces < 1 ? 1 : (pieces < kGemvStealPieces ? pieces : kGemvStealPieces);
}

}  // namespace matmul_internal

int64_t MatmulGemvMaxM(Isa isa) {
  // bench/results/cpu_matmul.md (BM_PathCrossover). AVX2: measured; the GEMV (each weight row
  // group read once, m rows of x dotted in chunks of 4 from L1) keeps up with the panel GEMM up
  // to about 16 rows. AVX-512: the same balance of loads, conversions and FMAs per weight byte,
  // not yet measured. AMX (a Xeon with AMX, 2 threads, bf16 weights of the 1.1B shape over more
  // than 1 GiB, BM_GemvSweep, ms per sweep, GEMV against the tile GEMM at the default precision):
  // m = 8: 54 against 82, 12: 69 against 83, 16: 83 against 84, and at 24 the AVX-512 FMA GEMM
  // (171) far behind the tiles (119). The tiles stream the weight at ~14 GB/s at these m (16
  // rows of a tile are 16 separate 64-byte reads), the GEMV at up to 30. Yet the limit stays 4:
  // with 16, prompts of up to 16 tokens ran on the GEMV and longer ones on the tiles, and on the
  // golden llama3_gqa model a prompt token's logprob then differed by 1.6e-3 between a prompt
  // that ends there and a longer one (integration_loomd_openai, echo logprobs), where the FMA
  // paths agree to 5e-4. The tiles' sums differ from f32 FMA sums by more than the matmul
  // tests' bound shows on their own; until that is understood, batches stay on the tiles.
  switch (isa) {
    case Isa::kScalar:
      return 4;
    case Isa::kAvx2:
      return 16;
    case Isa::kAvx512:
      return 16;
    case Isa::kAmx:
      return 4;
  }
  return 4;
}

int64_t MatmulQuantGemvMaxM(Isa isa, DType dtype, QuantActivations quant_activations) {
  // bench/results/cpu_matmul_quant.md (BM_QuantPathCrossover, 2 threads). With f32 x the
  // quantized GEMV pays the widening and an f32 FMA per weight and x row; the panel GEMM
  // (weights dequantized once per block, reused over the token panels) catches up, on AVX2, at
  // about 16 rows for q8_0 / q4_0 and between 4 and 8 for the k-quants, whose decode costs more.
  // On AVX-512 (Zen 4; the AMX level runs the same kernels for quantized weights) the GEMV is
  // ahead at 16 rows for q8_0 / q4_0 (114 / 213 ms against 149 / 367 per sweep) and at 8 for
  // Q4_K_M (158 against 376), the GEMM at 16 for Q4_K_M (215 against 303). The int8 GEMV is
  // ahead of the GEMM, or level, through 16 rows for every format. Scalar: the float limit.
  // AVX2, Zen 3 (2026-11-29, 2 rounds, ms per sweep at m = 16, GEMV against GEMM): q4_0 306-326
  // against 351-353 and q4_1 279-288 against 318-330 on the 1.1B shape; q8_0 (170-188 against
  // 152-161) and Q4_K_M (356-370 against 284-292) not. On the default model (SmolLM2-135M Q4_1,
  // smaller matrices) the GEMV won decode at batch 12 (1 / 2 threads: 178-179 against 162-165
  // tok/s, 297-327 against 287-298) and lost at 16 (185-188 against 209-214): q4_0 / q4_1 take
  // the GEMV through 12 rows.
  if (isa == Isa::kScalar) return MatmulGemvMaxM(isa);
  if (quant_activations == QuantActivations::kInt8) return 16;
  const bool k_quant = TraitsOf(dtype).block_elems == 256;
  if (isa == Isa::kAvx512 || isa == Isa::kAmx) return k_quant ? 8 : 16;
  if (dtype == DType::kQ4_0 || dtype == DType::kQ4_1) return 12;
  return k_quant ? 4 : 8;
}

namespace {

// The smallest and largest quantized GEMV limit over all formats (for the workspace size, which
// does not know the weights).
int64_t QuantGemvMaxMOverFormats(Isa isa, QuantActivations mode, bool largest) {
  int64_t out = -1;
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K,
                      DType::kQ6_K}) {
    const int64_t limit = MatmulQuantGemvMaxM(isa, dtype, mode);
    if (out < 0 || (largest ? limit > out : limit < out)) out = limit;
  }
  return out;
}

}  // namespace

MatmulPath ChooseMatmulPath(int64_t m, const MatmulOptions& options) {
  if (options.path != MatmulPath::kAuto) return options.path;
  return m <= MatmulGemvMaxM(ResolveIsa(options)) ? MatmulPath::kGemv : MatmulPath::kGemm;
}

MatmulPath ChooseMatmulPath(int64_t m, std::span<const MatmulProjection> projections,
                            const MatmulOptions& options) {
  if (options.path != MatmulPath::kAuto) return options.path;
  // The smallest limit of the group's quantized formats (one path per group).
  const Isa isa = ResolveIsa(options);
  int64_t limit = -1;
  for (const MatmulProjection& p : projections) {
    if (!IsQuantizedDType(p.dtype)) continue;
    const int64_t l = MatmulQuantGemvMaxM(isa, p.dtype, options.quant_activations);
    limit = limit < 0 || l < limit ? l : limit;
  }
  if (limit < 0) return ChooseMatmulPath(m, options);
  return m <= limit ? MatmulPath::kGemv : MatmulPath::kGemm;
}

size_t MatmulWorkspaceBytes(int64_t m, int64_t k, int num_threads, const MatmulOptions& options) {
  if (m <= 0 || k <= 0) return 0;
  // The group's weights are not known here: size for both the float and the quantized choice.
  const Isa isa = ResolveIsa(options);
  const bool float_gemm = ChooseMatmulPath(m, options) == MatmulPath::kGemm;
  const QuantActivations mode = options.quant_activations;
  // Whether some quantized group may take the GEMM path, and some the GEMV.
  const bool quant_gemm = options.path == MatmulPath::kAuto
                              ? m > QuantGemvMaxMOverFormats(isa, mode, /*largest=*/false)
                              : options.path == MatmulPath::kGemm;
  const bool quant_gemv = options.path == MatmulPath::kAuto
                              ? m <= QuantGemvMaxMOverFormats(isa, mode, /*largest=*/true)
                              : options.path == MatmulPath::kGemv;
  size_t bytes = 0;
  if (float_gemm || quant_gemm) {
    bytes = GemmWorkspaceBytes(isa, m, k, num_threads, options.precision);
  }
  // The vdpbf16ps GEMV holds x in bf16.
  if (!float_gemm && (isa == Isa::kAvx512 || isa == Isa::kAmx) &&
      options.precision == MatmulPrecision::kBf16 && m <= matmul_internal::GemvBf16DotMaxM()) {
    const size_t x_bf16 = matmul_internal::GemvBf16DotAvx512WorkspaceBytes(m, k);
    bytes = x_bf16 > bytes ? x_bf16 : bytes;
  }
  if (quant_gemv && mode == QuantActivations::kInt8 && isa != Isa::kScalar) {
    const size_t int8 = matmul_internal::Int8XWorkspaceBytes(m, k);
    bytes = int8 > bytes ? int8 : bytes;
  }
  return bytes;
}

MatmulStatus Matmul(const MatmulInput& x, const MatmulProjection& projection, ThreadPool& pool,
                    void* workspace, size_t workspace_bytes, const MatmulOptions& options) {
  return MatmulGroup(x, std::span<const MatmulProjection>(&projection, 1), pool, workspace,
                     workspace_bytes, options);
}

MatmulStatus MatmulGroup(const MatmulInput& x, std::span<const MatmulProjection> projections,
                         ThreadPool& pool, void* workspace, size_t workspace_bytes,
                         const MatmulOptions& options) {
  if (!ValidInput(x)) return MatmulStatus::kInvalidArgument;
  for (const MatmulProjection& p : projections) {
    if (!ValidProjection(p, x)) return MatmulStatus::kInvalidArgument;
  }
  const Isa isa = ResolveIsa(options);
  if (static_cast<int>(isa) > static_cast<int>(ThisCpuMaxIsa())) {
    return MatmulStatus::kUnsupportedIsa;
  }
  if (x.m == 0 || matmul_internal::CountRowUnits(projections, 1) == 0) return MatmulStatus::kOk;
  if (x.k == 0) {
    WriteBiasOnly(x, projections);
    return MatmulStatus::kOk;
  }
  const size_t required = MatmulWorkspaceBytes(x.m, x.k, pool.num_threads(), options);
  if (required > 0 && (workspace == nullptr || workspace_bytes < required)) {
    return MatmulStatus::kWorkspaceTooSmall;
  }
  const GroupArgs args{x,
                       projections,
                       options.precision,
                       options.quant_activations,
                       workspace,
                       workspace_bytes,
                       ResolveGemvLayout(options.gemv_layout)};
  Run(isa, ChooseMatmulPath(x.m, projections, options), args, pool);
  return MatmulStatus::kOk;
}

std::string_view MatmulStatusName(MatmulStatus status) {
  switch (status) {
    case MatmulStatus::kOk:
      return "ok";
    case MatmulStatus::kInvalidArgument:
      return "invalid argument";
    case MatmulStatus::kWorkspaceTooSmall:
      return "workspace too small";
    case MatmulStatus::kUnsupportedIsa:
      return "instruction set not supported by this CPU";
  }
  return "?";
}

}  // namespace loom::cpu
