// Memory bandwidth of decode attention on Llama-3-8B shapes (32 query heads, 8 kv heads,
// head_dim 128, bf16 cache, 16-token blocks): the split-KV tensor-core kernel
// (cuda::DecodeAttention) against the general paged-attention kernel (cuda::PagedAttention),
// for batch 1/8/64/256 x context 1K/8K/32K (combinations over 8 GiB of cache are left out).
//
// Decode reads every cached K/V byte once per step, so GB/s is the figure of merit. Each
// benchmark counts K + V bytes read (batch * context * 8 * 128 * 2 * 2) plus q read and out
// written (f32); the workspace traffic of the split kernel (partial outputs, a few % at most) is
// not counted. Reported counters:
//   GBps           bytes / kernel time, in 1e9 bytes per second
//   copy_fraction  GBps over the device-to-device cudaMemcpy bandwidth measured at start-up
//   MiB_per_launch bytes counted per launch
//   splits         KV splits DecodeAttention planned (DecodeAttention rows only)
// When one launch reads less than twice the L2, consecutive launches cycle through several
// copies of the cache (disjoint blocks, own block tables) so the figure is DRAM, not L2.
// Launches are timed in batches of 10 with CUDA events (manual time). Without a CUDA device the
// program prints a line and exits 0 with no benchmarks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "bench/kernels/cuda_bench_util.h"
#include "kernels/common/attention_args.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/paged_attention.h"

namespace loom {
namespace {

using bench::DeviceBuffer;
using bench::Upload;
using BenchContext = bench::CudaBench;
constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlockSize = 16;
constexpr double kMaxCacheBytes = 8.0 * (1ull << 30);

double CacheBytes(int64_t batch, int64_t context) {
  return 2.0 * batch * context * kKvHeads * kHeadDim * 2;
}

// A decode batch: `copies` disjoint caches' worth of blocks, one block table per copy.
struct DecodeSetup {
  int32_t batch, context, copies, blocks_per_seq;
  DeviceBuffer k, v, q, out, query_start, seq_lens, tables;

  DecodeSetup(int32_t batch_, int32_t context_, int32_t copies_)
      : batch(batch_),
        context(context_),
        copies(copies_),
        blocks_per_seq(context_ / kBlockSize),
        k(size_t(copies_) * batch_ * context_ * kKvHeads * kHeadDim * 2),
        v(size_t(copies_) * batch_ * context_ * kKvHeads * kHeadDim * 2),
        q(size_t(batch_) * kHeads * kHeadDim * 4),
        out(size_t(batch_) * kHeads * kHeadDim * 4),
        query_start(size_t(batch_ + 1) * 4),
        seq_lens(size_t(batch_) * 4),
        tables(size_t(copies_) * batch_ * (context_ / kBlockSize) * 4) {
    std::vector<int32_t> starts(batch + 1);
    std::iota(starts.begin(), starts.end(), 0);
    Upload(starts, query_start);
    Upload(std::vector<int32_t>(batch, context), seq_lens);
    std::vector<int32_t> ids(size_t(copies) * batch * blocks_per_seq);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
    Upload(ids, tables);
  }

  PagedAttentionArgs Args(int copy) const {
    PagedAttentionArgs args;
    args.q = q.as<float>();
    args.q_stride = int64_t{kHeads} * kHeadDim;
    args.out = out.as<float>();
    args.out_stride = args.q_stride;
    args.num_heads = kHeads;
    args.cache = {k.as<void>(), v.as<void>(), DType::kBF16,
                  copies * batch * blocks_per_seq, kKvHeads, kBlockSize, kHeadDim};
    args.num_seqs = batch;
    args.query_start = query_start.as<int32_t>();
    args.seq_lens = seq_lens.as<int32_t>();
    args.block_tables = tables.as<int32_t>() + int64_t{copy} * batch * blocks_per_seq;
    args.max_blocks_per_seq = blocks_per_seq;
    args.scale = 0.08838834764831845f;  // 1 / sqrt(128)
    return args;
  }
};

void BenchDecode(benchmark::State& state, const BenchContext& ctx, bool split_kernel) {
  const int32_t batch = static_cast<int32_t>(state.range(0));
  const int32_t context = static_cast<int32_t>(state.range(1));
  const double cache_bytes = CacheBytes(batch, context);
  const int32_t copies = static_cast<int32_t>(
      std::clamp<double>(std::ceil(2.0 * ctx.l2_bytes / cache_bytes), 1.0, 64.0));
  DecodeSetup setup(batch, context, copies);
  const double bytes = cache_bytes + 2.0 * batch * kHeads * kHeadDim * 4;
  if (split_kernel) {
    const size_t workspace_bytes =
        cuda::DecodeAttentionWorkspaceBytes(batch, kHeads, kHeadDim, context);
    DeviceBuffer workspace(workspace_bytes);
    state.counters["splits"] =
        cuda::DecodeAttentionNumSplits(batch, kKvHeads, kHeadDim, context, ctx.sm_count);
    bench::TimeCopies(state, ctx, bytes, copies, [&](int copy) {
      return cuda::DecodeAttention(setup.Args(copy), context, workspace.as<void>(),
                                   workspace_bytes, ctx.stream);
    });
  } else {
    bench::TimeCopies(state, ctx, bytes, copies, [&](int copy) {
      return cuda::PagedAttention(setup.Args(copy), batch, ctx.stream);
    });
  }
}

void Register(const BenchContext& ctx) {
  for (bool split_kernel : {true, false}) {
    const char* name = split_kernel ? "DecodeAttention/llama3_8b_bf16"
                                    : "PagedAttention/llama3_8b_bf16";
    auto* bench = benchmark::RegisterBenchmark(name, [split_kernel, &ctx](benchmark::State& s) {
                    BenchDecode(s, ctx, split_kernel);
                  })
                      ->UseManualTime()
                      ->Unit(benchmark::kMicrosecond)
                      ->ArgNames({"batch", "context"});
    for (int64_t batch : {1, 8, 64, 256}) {
      for (int64_t context : {1024, 8192, 32768}) {
        if (CacheBytes(batch, context) <= kMaxCacheBytes) bench->Args({batch, context});
      }
    }
  }
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  return loom::bench::RunCudaBenchmarks(argc, argv, "cuda_decode_attention_bench",
                                        [](const loom::bench::CudaBench& device) {
                                          loom::Register(device);
                                        });
}
