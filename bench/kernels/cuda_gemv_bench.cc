// Memory bandwidth of the decode-sized matmuls on CUDA: the dense-weight GEMV and its
// tensor-core variant (kernels/cuda/dense_gemv.h) for bf16 and f16 weights beside cuBLAS (the
// input rounded to 16 bits by ConvertRows, then cublasGemmEx), and the kernels for
// block-quantized weights (kernels/cuda/quant_matmul.h): the GEMV for every format, and the
// dequantization of a weight tile to bf16 that larger batches feed to cuBLAS. The shapes are
// Llama-3-8B's matrices (and the 1.1B shape's, which the engine benchmark runs).
//
// A decode-sized matmul reads every weight byte once and little else, so GB/s against the
// device's copy bandwidth is its roofline. Each benchmark counts the bytes its kernel must move
// (the header's accounting: weight bytes + x + y, or quantized bytes read + bf16 bytes written),
// times batches of launches with CUDA events (manual time) and reports:
//   GBps           bytes moved / kernel time, in 1e9 bytes per second
//   copy_fraction  GBps over the device-to-device cudaMemcpy bandwidth measured at start-up
//   MiB_per_launch bytes moved per launch
// Every launch reads a different copy of the weights, and the copies together are at least four
// times the L2 cache, so the weights come from device memory as they do in a model's forward
// pass (a single 9 MiB matrix would otherwise stay in the 50 MiB L2 and time the cache).
// Without a CUDA device the program prints a line and exits 0 with no benchmarks.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>

#include "benchmark/benchmark.h"
#include "bench/kernels/cuda_bench_util.h"
#include "kernels/common/dtype.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/dense_gemv.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/quant_matmul.h"

namespace loom {
namespace {

using bench::DeviceBuffer;

constexpr int kMaxWeightCopies = 64;

struct BenchContext : bench::CudaBench {
  cublasHandle_t cublas = nullptr;
};

// Enough copies of a `bytes`-sized weight that cycling through them misses the L2 cache.
std::vector<std::unique_ptr<DeviceBuffer>> WeightCopies(size_t bytes, const BenchContext& ctx) {
  const size_t wanted = (4 * std::max<size_t>(ctx.l2_bytes, size_t{1} << 20) + bytes - 1) / bytes;
  const size_t copies = std::clamp<size_t>(wanted, 1, kMaxWeightCopies);
  std::vector<std::unique_ptr<DeviceBuffer>> out;
  for (size_t i = 0; i < copies; ++i) out.push_back(std::make_unique<DeviceBuffer>(bytes));
  return out;
}

// Times launch(w) over the weight copies in turn, with the counters for `bytes` per launch.
void TimeWeights(benchmark::State& state, double bytes, const BenchContext& ctx,
                 const std::vector<std::unique_ptr<DeviceBuffer>>& weights,
                 const std::function<cudaError_t(const void*)>& launch) {
  bench::TimeCopies(state, ctx, bytes, static_cast<int>(weights.size()),
                    [&](int copy) { return launch(weights[copy]->as<void>()); });
}

// y [rows, out] = x [rows, in] . W^T, W [out, in] in `dtype`.
void BenchGemv(benchmark::State& state, const BenchContext& ctx, DType dtype) {
  const int32_t rows = static_cast<int32_t>(state.range(0));
  const int32_t out = static_cast<int32_t>(state.range(1));
  const int32_t in = static_cast<int32_t>(state.range(2));
  const size_t weight_bytes = size_t(out) * DTypeRowBytes(dtype, in);
  const auto weights = WeightCopies(weight_bytes, ctx);
  DeviceBuffer x(size_t(rows) * in * 4), y(size_t(rows) * out * 4);
  const double bytes = double(weight_bytes) + 4.0 * rows * (double(in) + out);
  TimeWeights(state, bytes, ctx, weights, [&](const void* w) {
    return cuda::QuantGemv(x.as<float>(), in, rows, w, dtype, out, in, nullptr, y.as<float>(),
                           out, ctx.stream);
  });
  state.counters["weight_copies"] = static_cast<double>(weights.size());
}

// The bf16 tile of the larger-batch path: rows [0, rows) of W [rows, in] dequantized.
void BenchDequantize(benchmark::State& state, const BenchContext& ctx, DType dtype) {
  const int32_t rows = static_cast<int32_t>(state.range(0));
  const int32_t in = static_cast<int32_t>(state.range(1));
  const size_t weight_bytes = size_t(rows) * DTypeRowBytes(dtype, in);
  const auto weights = WeightCopies(weight_bytes, ctx);
  DeviceBuffer tile(size_t(rows) * in * 2);
  const double bytes = double(weight_bytes) + 2.0 * rows * in;
  TimeWeights(state, bytes, ctx, weights, [&](const void* w) {
    return cuda::DequantizeRows(w, dtype, 0, rows, in, DType::kBF16, tile.as<void>(),
                                ctx.stream);
  });
}

// How a dense-weight product runs: the GEMV kernel, its tensor-core variant, or the input
// rounded to the weights' type and cublasGemmEx with f32 accumulation and output (CudaOps's path
// for more than one row).
enum class DensePath { kGemv, kGemvMma, kCublas };

void BenchDenseGemv(benchmark::State& state, const BenchContext& ctx, DType dtype,
                    DensePath path) {
  const int32_t rows = static_cast<int32_t>(state.range(0));
  const int32_t out = static_cast<int32_t>(state.range(1));
  const int32_t in = static_cast<int32_t>(state.range(2));
  const size_t weight_bytes = size_t(out) * in * DTypeSize(dtype);
  const auto weights = WeightCopies(weight_bytes, ctx);
  DeviceBuffer x(size_t(rows) * in * 4), x16(size_t(rows) * in * 2), y(size_t(rows) * out * 4);
  const double bytes = double(weight_bytes) + 4.0 * rows * (double(in) + out);
  const cudaDataType type = dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  TimeWeights(state, bytes, ctx, weights, [&](const void* w) {
    if (path == DensePath::kGemv) {
      return cuda::DenseGemv(x.as<float>(), in, rows, w, dtype, out, in, nullptr, y.as<float>(),
                             out, ctx.stream);
    }
    if (path == DensePath::kGemvMma) {
      return cuda::DenseGemvMma(x.as<float>(), in, rows, w, dtype, out, in, nullptr,
                                y.as<float>(), out, ctx.stream);
    }
    const cudaError_t converted =
        cuda::ConvertRows(x.as<float>(), in, rows, in, dtype, x16.as<void>(), ctx.stream);
    if (converted != cudaSuccess) return converted;
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t status = cublasGemmEx(
        ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, w, type, in, x16.as<void>(),
        type, in, &beta, y.as<float>(), CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return status == CUBLAS_STATUS_SUCCESS ? cudaGetLastError() : cudaErrorUnknown;
  });
}

void Register(const BenchContext& ctx) {
  const std::pair<DensePath, const char*> paths[] = {{DensePath::kGemv, "DenseGemv/"},
                                                     {DensePath::kGemvMma, "DenseGemvMma/"},
                                                     {DensePath::kCublas, "CublasGemv/"}};
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const auto& [path, prefix] : paths) {
      const std::string name = prefix + std::string(DTypeName(dtype));
      benchmark::RegisterBenchmark(
          name.c_str(),
          [&ctx, dtype, path](benchmark::State& s) { BenchDenseGemv(s, ctx, dtype, path); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->ArgNames({"rows", "out", "in"})
          ->Args({1, 256, 2048})      // 1.1B: k/v projection
          ->Args({1, 2048, 2048})     // 1.1B: q/o projection
          ->Args({1, 5632, 2048})     // 1.1B: gate/up projection
          ->Args({1, 2048, 5632})     // 1.1B: down projection
          ->Args({1, 4096, 4096})     // 8B: q/o projection
          ->Args({1, 14336, 4096})    // 8B: gate/up projection
          ->Args({1, 4096, 14336})    // 8B: down projection
          ->Args({1, 128256, 4096})   // 8B: LM head
          ->Args({2, 14336, 4096})
          ->Args({4, 14336, 4096})
          ->Args({8, 2048, 2048})
          ->Args({8, 5632, 2048})
          ->Args({8, 14336, 4096})
          ->Args({8, 4096, 14336});
    }
  }
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K,
                      DType::kQ6_K}) {
    const std::string name(DTypeName(dtype));
    benchmark::RegisterBenchmark(
        ("QuantGemv/" + name).c_str(),
        [&ctx, dtype](benchmark::State& s) { BenchGemv(s, ctx, dtype); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->ArgNames({"rows", "out", "in"})
        ->Args({1, 4096, 4096})     // q/o projection
        ->Args({1, 14336, 4096})    // gate/up projection
        ->Args({1, 4096, 14336})    // down projection
        ->Args({1, 128256, 4096})   // LM head
        ->Args({4, 14336, 4096})
        ->Args({8, 14336, 4096})
        ->Args({8, 4096, 14336});
    benchmark::RegisterBenchmark(
        ("DequantizeRows/" + name + "_to_bf16").c_str(),
        [&ctx, dtype](benchmark::State& s) { BenchDequantize(s, ctx, dtype); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->ArgNames({"rows", "in"})
        ->Args({1920, 4096});  // one 16 MiB tile of CudaOps
  }
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  loom::BenchContext ctx;
  const int status = loom::bench::RunCudaBenchmarks(
      argc, argv, "cuda_gemv_bench", [&ctx](const loom::bench::CudaBench& device) {
        static_cast<loom::bench::CudaBench&>(ctx) = device;
        if (cublasCreate(&ctx.cublas) != CUBLAS_STATUS_SUCCESS ||
            cublasSetStream(ctx.cublas, ctx.stream) != CUBLAS_STATUS_SUCCESS) {
          std::fprintf(stderr, "cuda_gemv_bench: cuBLAS could not be set up\n");
          std::exit(1);
        }
        loom::Register(ctx);
      });
  if (ctx.cublas != nullptr) {
    cublasSetStream(ctx.cublas, nullptr);  // the benchmarks' stream is gone by now
    cublasDestroy(ctx.cublas);
  }
  return status;
}
