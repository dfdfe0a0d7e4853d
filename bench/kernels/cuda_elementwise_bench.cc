// Memory bandwidth of the CUDA element-wise kernels (embedding, RMSNorm, residual-add RMSNorm,
// SiLU * up, RoPE, KV write) against what the device's own copy engine path delivers.
//
// These ops move a few bytes per flop, so GB/s is their figure of merit. Each benchmark counts
// the bytes its kernel must move (reads plus writes, as stated in the kernel headers), times
// batches of launches with CUDA events (manual time), and reports:
//   GBps           bytes moved / kernel time, in 1e9 bytes per second
//   copy_fraction  GBps over the device-to-device cudaMemcpy bandwidth measured at start-up
//                  (same accounting: bytes read plus bytes written)
// Prefill-sized shapes move hundreds of MiB per launch (several times the L2), so they measure
// DRAM bandwidth; the decode-sized rows (64 tokens) show launch latency instead.
// Without a CUDA device the program prints a line and exits 0 with no benchmarks.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "bench/kernels/cuda_bench_util.h"
#include "kernels/common/attention_args.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/kv_write.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"

namespace loom {
namespace {

using bench::DeviceBuffer;
using bench::Upload;

using BenchContext = bench::CudaBench;

// Every launch reads and writes the same buffers: TimeCopies with one copy.
void Time(benchmark::State& state, const BenchContext& ctx, double bytes,
          const std::function<cudaError_t()>& launch) {
  bench::TimeCopies(state, ctx, bytes, 1, [&](int) { return launch(); });
}

void BenchRmsNorm(benchmark::State& state, const BenchContext& ctx, bool add) {
  const int32_t rows = static_cast<int32_t>(state.range(0));
  const int32_t dim = static_cast<int32_t>(state.range(1));
  const size_t n = size_t(rows) * dim;
  DeviceBuffer x(n * 4), delta(n * 4), out(n * 4), weight(size_t(dim) * 2);
  const double bytes = (add ? 16.0 : 8.0) * n + 2.0 * dim;
  Time(state, ctx, bytes, [&] {
    return add ? cuda::AddRmsNorm(x.as<float>(), delta.as<float>(), rows, dim, weight.as<void>(),
                                  DType::kBF16, 1e-5f, out.as<float>(), ctx.stream)
               : cuda::RmsNorm(x.as<float>(), dim, rows, dim, weight.as<void>(), DType::kBF16,
                               1e-5f, out.as<float>(), dim, ctx.stream);
  });
}

void BenchSiluMul(benchmark::State& state, const BenchContext& ctx) {
  const int32_t rows = static_cast<int32_t>(state.range(0));
  const int32_t dim = static_cast<int32_t>(state.range(1));
  const size_t n = size_t(rows) * dim;
  DeviceBuffer gate(n * 4), up(n * 4), out(n * 4);
  Time(state, ctx, 12.0 * n, [&] {
    return cuda::SiluMul(gate.as<float>(), dim, up.as<float>(), dim, rows, dim, out.as<float>(),
                         dim, ctx.stream);
  });
}

void BenchRope(benchmark::State& state, const BenchContext& ctx) {
  const int32_t tokens = static_cast<int32_t>(state.range(0));
  const int32_t heads = static_cast<int32_t>(state.range(1));
  const int32_t head_dim = 128;
  const size_t n = size_t(tokens) * heads * head_dim;
  const size_t angles_bytes = size_t(tokens) * (head_dim / 2) * 4;
  DeviceBuffer x(n * 4), cos(angles_bytes), sin(angles_bytes);
  const double bytes = 8.0 * n + 8.0 * tokens * (head_dim / 2);
  Time(state, ctx, bytes, [&] {
    return cuda::Rope(x.as<float>(), int64_t{heads} * head_dim, tokens, heads, head_dim, head_dim,
                      cos.as<float>(), sin.as<float>(), ctx.stream);
  });
}

void BenchWriteKv(benchmark::State& state, const BenchContext& ctx) {
  const int32_t tokens = static_cast<int32_t>(state.range(0));
  const int32_t kv_heads = 8, head_dim = 128, block_size = 16;
  const int32_t num_blocks = (tokens + block_size - 1) / block_size;
  const size_t row = size_t(kv_heads) * head_dim;
  const size_t cache_elems = size_t(num_blocks) * block_size * row;
  DeviceBuffer k(tokens * row * 4), v(tokens * row * 4), slots(size_t(tokens) * 4);
  DeviceBuffer k_cache(cache_elems * 2), v_cache(cache_elems * 2);
  std::vector<int32_t> slot_mapping(tokens);
  std::iota(slot_mapping.begin(), slot_mapping.end(), 0);
  std::shuffle(slot_mapping.begin(), slot_mapping.end(), std::mt19937(1));
  Upload(slot_mapping, slots);
  KvWriteArgs args;
  args.k = k.as<float>();
  args.v = v.as<float>();
  args.k_stride = args.v_stride = static_cast<int64_t>(row);
  args.num_tokens = tokens;
  args.slot_mapping = slots.as<int32_t>();
  args.cache = {k_cache.as<void>(), v_cache.as<void>(), DType::kBF16, num_blocks, kv_heads,
                block_size, head_dim};
  const double bytes = 2.0 * tokens * row * (4 + 2) + 4.0 * tokens;
  Time(state, ctx, bytes, [&] { return cuda::WriteKv(args, ctx.stream); });
}

void BenchEmbedding(benchmark::State& state, const BenchContext& ctx) {
  const int32_t tokens = static_cast<int32_t>(state.range(0));
  const int32_t vocab = 128256, dim = 4096;
  DeviceBuffer table(size_t(vocab) * dim * 2), ids(size_t(tokens) * 4);
  DeviceBuffer out(size_t(tokens) * dim * 4);
  std::vector<int32_t> token_ids(tokens);
  std::mt19937 rng(2);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  for (int32_t& id : token_ids) id = token(rng);
  Upload(token_ids, ids);
  const double bytes = double(tokens) * dim * (2 + 4) + 4.0 * tokens;
  Time(state, ctx, bytes, [&] {
    return cuda::Embedding(ids.as<int32_t>(), tokens, table.as<void>(), DType::kBF16, dim,
                           out.as<float>(), ctx.stream);
  });
}

void Register(const BenchContext& ctx) {
  auto add = [&ctx](const char* name, auto fn) {
    return benchmark::RegisterBenchmark(name, [fn, &ctx](benchmark::State& s) { fn(s, ctx); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  };
  auto norm = [](benchmark::State& s, const BenchContext& c) { BenchRmsNorm(s, c, false); };
  auto add_norm = [](benchmark::State& s, const BenchContext& c) { BenchRmsNorm(s, c, true); };
  add("RmsNorm/bf16_weight", norm)
      ->ArgNames({"rows", "dim"})
      ->Args({64, 4096})
      ->Args({16384, 4096})
      ->Args({8192, 8192});
  add("AddRmsNorm/bf16_weight", add_norm)
      ->ArgNames({"rows", "dim"})
      ->Args({64, 4096})
      ->Args({16384, 4096});
  add("SiluMul", BenchSiluMul)->ArgNames({"rows", "dim"})->Args({8192, 14336});
  add("Rope/head_dim_128", BenchRope)->ArgNames({"tokens", "heads"})->Args({64, 32})->Args(
      {16384, 32});
  add("WriteKv/bf16_8x128", BenchWriteKv)->ArgNames({"tokens"})->Args({64})->Args({16384});
  add("Embedding/bf16_4096", BenchEmbedding)->ArgNames({"tokens"})->Args({16384});
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  return loom::bench::RunCudaBenchmarks(argc, argv, "cuda_elementwise_bench",
                                        [](const loom::bench::CudaBench& device) {
                                          loom::Register(device);
                                        });
}
