// Decode attention per KV-cache format on Llama-3-8B shapes (32 query heads, 8 KV heads,
// head_dim 128, 64-token blocks): bf16 (cuda::DecodeAttention) against fp8 E4M3 and the low-bit
// int8 / int4 / int2 formats with K per channel (cuda::DecodeAttentionKv), batch 1 and 8 x
// context 1K, 4K, 8K, 32K and 128K (combinations over 8 GiB of bf16 cache are left out).
//
// Decode reads every cached byte once per step, so the bytes a format stores per token decide
// its time once the kernel is bandwidth-bound. Each sequence holds `context` tokens: full blocks
// packed (or fp8 / bf16 elements) and a last block half full, which low-bit formats read from the
// bf16 tail. Bytes counted per launch, per sequence and KV head:
//   bf16: 2 * context * head_dim * 2             fp8: 2 * context * head_dim
//   low-bit: 2 * full_tokens * head_dim * bits / 8 (codes of K and V)
//            + full_blocks * 4 * head_dim (K scales and zeros per channel)
//            + full_tokens * 4 (V scales and zeros per token)
//            + 2 * tail_tokens * head_dim * 2 (bf16 tail rows of K and V)
// plus q read and out written (f32); the split partials (a few % at most) are not counted.
// Reported counters:
//   GBps            bytes / kernel time, in 1e9 bytes per second
//   copy_fraction   GBps over the device-to-device cudaMemcpy bandwidth measured at start-up
//   MiB_per_launch  bytes counted per launch
//   bytes_per_token bytes one cached token of one KV head costs (K + V), tails aside
//   speedup_vs_bf16 the bf16 time of the same shape over this one (bf16 is measured first)
//   splits          KV splits planned
// When one launch reads less than twice the L2, consecutive launches cycle through several
// copies of the cache (disjoint blocks, tails and block tables) so the figure is DRAM, not L2.
// Launches are timed in batches of 10 with CUDA events (manual time). Without a CUDA device the
// program prints a line and exits 0 with no benchmarks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "bench/kernels/cuda_bench_util.h"
#include "kernels/common/attention_args.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/decode_attention_kv.h"
#include "kernels/cuda/device.h"

namespace loom {
namespace {

using bench::DeviceBuffer;
using bench::Upload;
constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlockSize = 64;
constexpr double kMaxBf16CacheBytes = 8.0 * (1ull << 30);

struct BenchContext : bench::CudaBench {
  std::map<std::pair<int64_t, int64_t>, double> bf16_seconds;  // (batch, context) -> time
};

PagedKvView Layout(DType dtype, int32_t num_blocks, int32_t num_tail_slots) {
  PagedKvView view;
  view.dtype = dtype;
  view.num_blocks = num_blocks;
  view.num_kv_heads = kKvHeads;
  view.block_size = kBlockSize;
  view.head_dim = kHeadDim;
  view.num_tail_slots = num_tail_slots;
  return view;
}

// Region bytes of one block (all KV heads) of K and of V.
std::pair<double, double> BlockBytes(DType dtype) {
  const PagedKvView view = Layout(dtype, 1, 0);
  if (view.low_bit()) {
    return {double(kKvHeads) * view.packed().k_head_bytes(),
            double(kKvHeads) * view.packed().v_head_bytes()};
  }
  const double bytes = double(view.block_stride()) * DTypeSize(dtype);
  return {bytes, bytes};
}

// Bytes a launch reads from the cache (see the file comment).
double CacheBytesRead(DType dtype, int64_t batch, int64_t context) {
  if (!IsLowBitKvDType(dtype)) {
    return 2.0 * batch * context * kKvHeads * kHeadDim * DTypeSize(dtype);
  }
  const int64_t tail_tokens = context % kBlockSize;
  const int64_t full_blocks = context / kBlockSize;
  const auto [k_block, v_block] = BlockBytes(dtype);
  const double tail = 2.0 * tail_tokens * kKvHeads * kHeadDim * 2;
  return batch * (full_blocks * (k_block + v_block) + tail);
}

// A decode batch: `copies` disjoint caches' worth of blocks and tails, one block table and tail
// slot list per copy.
struct DecodeSetup {
  DType dtype;
  int32_t batch, context, copies, blocks_per_seq;
  DeviceBuffer k, v, tail_k, tail_v, q, out, query_start, seq_lens, tables, tail_slots;

  DecodeSetup(DType dtype_, int32_t batch_, int32_t context_, int32_t copies_)
      : dtype(dtype_),
        batch(batch_),
        context(context_),
        copies(copies_),
        blocks_per_seq((context_ + kBlockSize - 1) / kBlockSize),
        k(size_t(copies_) * batch_ * blocks_per_seq *
          static_cast<size_t>(BlockBytes(dtype_).first)),
        v(size_t(copies_) * batch_ * blocks_per_seq *
          static_cast<size_t>(BlockBytes(dtype_).second)),
        tail_k(IsLowBitKvDType(dtype_) ? size_t(copies_) * batch_ * kKvHeads * kBlockSize *
                                             kHeadDim * 2
                                       : 0),
        tail_v(IsLowBitKvDType(dtype_) ? size_t(copies_) * batch_ * kKvHeads * kBlockSize *
                                             kHeadDim * 2
                                       : 0),
        q(size_t(batch_) * kHeads * kHeadDim * 4),
        out(size_t(batch_) * kHeads * kHeadDim * 4),
        query_start(size_t(batch_ + 1) * 4),
        seq_lens(size_t(batch_) * 4),
        tables(size_t(copies_) * batch_ * blocks_per_seq * 4),
        tail_slots(size_t(copies_) * batch_ * 4) {
    std::vector<int32_t> starts(batch + 1);
    std::iota(starts.begin(), starts.end(), 0);
    Upload(starts, query_start);
    Upload(std::vector<int32_t>(batch, context), seq_lens);
    std::vector<int32_t> ids(size_t(copies) * batch * blocks_per_seq);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
    Upload(ids, tables);
    std::vector<int32_t> slots(size_t(copies) * batch);
    std::iota(slots.begin(), slots.end(), 0);
    Upload(slots, tail_slots);
  }

  PagedAttentionArgs Args(int copy) const {
    PagedAttentionArgs args;
    args.q = q.as<float>();
    args.q_stride = int64_t{kHeads} * kHeadDim;
    args.out = out.as<float>();
    args.out_stride = args.q_stride;
    args.num_heads = kHeads;
    args.cache = Layout(dtype, copies * batch * blocks_per_seq, copies * batch);
    args.cache.k = k.as<void>();
    args.cache.v = v.as<void>();
    if (IsLowBitKvDType(dtype)) {
      args.cache.tail_k = tail_k.as<void>();
      args.cache.tail_v = tail_v.as<void>();
      args.tail_slots = tail_slots.as<int32_t>() + int64_t{copy} * batch;
    }
    args.num_seqs = batch;
    args.query_start = query_start.as<int32_t>();
    args.seq_lens = seq_lens.as<int32_t>();
    args.block_tables = tables.as<int32_t>() + int64_t{copy} * batch * blocks_per_seq;
    args.max_blocks_per_seq = blocks_per_seq;
    args.scale = 0.08838834764831845f;  // 1 / sqrt(128)
    args.num_tokens = batch;
    args.min_query_len = args.max_query_len = 1;
    return args;
  }
};

void BenchFormat(benchmark::State& state, BenchContext& ctx, DType dtype) {
  const int32_t batch = static_cast<int32_t>(state.range(0));
  // The last block half full: the tail a decode step reads on average.
  const int32_t context = static_cast<int32_t>(state.range(1)) - kBlockSize / 2;
  const double cache_bytes = CacheBytesRead(dtype, batch, context);
  const int32_t copies = static_cast<int32_t>(
      std::clamp<double>(std::ceil(2.0 * ctx.l2_bytes / cache_bytes), 1.0, 64.0));
  DecodeSetup setup(dtype, batch, context, copies);
  const double bytes = cache_bytes + 2.0 * batch * kHeads * kHeadDim * 4;
  const int32_t max_seq_len = setup.blocks_per_seq * kBlockSize;
  const size_t workspace_bytes =
      cuda::DecodeAttentionWorkspaceBytes(batch, kHeads, kHeadDim, max_seq_len);
  DeviceBuffer workspace(workspace_bytes);
  state.counters["splits"] =
      cuda::DecodeAttentionNumSplits(batch, kKvHeads, kHeadDim, max_seq_len, ctx.sm_count);
  const auto [k_block, v_block] = BlockBytes(dtype);
  state.counters["bytes_per_token"] = (k_block + v_block) / kKvHeads / kBlockSize;
  const bool bf16 = dtype == DType::kBF16;
  const double seconds = bench::TimeCopies(state, ctx, bytes, copies, [&](int copy) {
    const PagedAttentionArgs args = setup.Args(copy);
    return bf16 ? cuda::DecodeAttention(args, max_seq_len, workspace.as<void>(), workspace_bytes,
                                        ctx.stream)
                : cuda::DecodeAttentionKv(args, max_seq_len, workspace.as<void>(),
                                          workspace_bytes, ctx.stream);
  });
  const auto key = std::make_pair(state.range(0), state.range(1));
  if (bf16) ctx.bf16_seconds[key] = seconds;
  const auto it = ctx.bf16_seconds.find(key);
  if (it != ctx.bf16_seconds.end() && seconds > 0.0) {
    state.counters["speedup_vs_bf16"] = it->second / seconds;
  }
}

void Register(BenchContext& ctx) {
  for (DType dtype :
       {DType::kBF16, DType::kF8E4M3, DType::kKvInt8, DType::kKvInt4, DType::kKvInt2}) {
    const std::string name = "KvDecodeAttention/" + std::string(DTypeName(dtype));
    auto* bench = benchmark::RegisterBenchmark(name.c_str(),
                                               [dtype, &ctx](benchmark::State& s) {
                                                 BenchFormat(s, ctx, dtype);
                                               })
                      ->UseManualTime()
                      ->Unit(benchmark::kMicrosecond)
                      ->ArgNames({"batch", "context"});
    for (int64_t batch : {1, 8}) {
      for (int64_t context : {1024, 4096, 8192, 32768, 131072}) {
        if (CacheBytesRead(DType::kBF16, batch, context) <= kMaxBf16CacheBytes) {
          bench->Args({batch, context});
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  loom::BenchContext ctx;
  return loom::bench::RunCudaBenchmarks(argc, argv, "cuda_kv_attention_bench",
                                        [&ctx](const loom::bench::CudaBench& device) {
                                          static_cast<loom::bench::CudaBench&>(ctx) = device;
                                          loom::Register(ctx);
                                        });
}
