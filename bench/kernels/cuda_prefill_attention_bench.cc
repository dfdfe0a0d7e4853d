// Tensor-core throughput of the CUDA prefill attention (kernels/cuda/prefill_attention.h) on
// Llama-3-8B shapes: 32 query heads, 8 kv heads, head_dim 128, bf16 cache in 16-token blocks.
//
// Attention prefill is compute-bound, so TFLOP/s is its figure of merit. Each benchmark counts
// the causal FLOPs the math needs, 4 * head_dim * num_heads * (sum over query rows of the keys the
// row sees) (two matrix products of 2 flops per multiply-add; the skipped upper triangle is not
// counted), times batches of launches with CUDA events (manual time) and reports:
//   TFLOPs         those FLOPs / kernel time, in 1e12 per second
//   peak_fraction  TFLOPs over kPeakTflops, the dense bf16 tensor-core rate cuBLAS reaches on
//                  the H200 (790 TFLOP/s: the large bf16 GEMM measurement quoted in the issue
//                  that asked for this kernel). mma.sync kernels cannot use the wgmma path that
//                  rate comes from, so read the fraction as "of what the chip delivers", not "of
//                  what this instruction can reach".
// Shapes: whole prompts of 512, 2K, 4K and 8K tokens (batches of 4K-16K tokens), a 2K-token chunk
// after 6K cached tokens (chunked prefill), and the existing row-per-block cuda::PagedAttention on
// one shape for comparison.
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
#include "kernels/cuda/device.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/prefill_attention.h"

namespace loom {
namespace {

using bench::DeviceBuffer;
using bench::Upload;

constexpr double kPeakTflops = 790.0;
constexpr int32_t kNumHeads = 32;
constexpr int32_t kNumKvHeads = 8;
constexpr int32_t kHeadDim = 128;
constexpr int32_t kBlockSize = 16;

// `num_seqs` sequences of `seq_len` cached positions whose last `query_len` are query rows, in
// device memory, with shuffled block tables; `args` points at it.
class PrefillBatch {
 public:
  PrefillBatch(int32_t seq_len, int32_t query_len, int32_t num_seqs)
      : num_tokens_(query_len * num_seqs),
        blocks_per_seq_((seq_len + kBlockSize - 1) / kBlockSize),
        row_(int64_t{kNumHeads} * kHeadDim),
        cache_bytes_(size_t(blocks_per_seq_) * num_seqs * kNumKvHeads * kBlockSize * kHeadDim * 2),
        q_(size_t(num_tokens_) * row_ * 4),
        out_(size_t(num_tokens_) * row_ * 4),
        k_(cache_bytes_),
        v_(cache_bytes_),
        query_start_(size_t(num_seqs + 1) * 4),
        seq_lens_(size_t(num_seqs) * 4),
        tables_(size_t(num_seqs) * blocks_per_seq_ * 4) {
    std::vector<int32_t> query_start(num_seqs + 1);
    for (int32_t s = 0; s <= num_seqs; ++s) query_start[s] = s * query_len;
    std::vector<int32_t> tables(size_t(num_seqs) * blocks_per_seq_);
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), std::mt19937(3));
    Upload(query_start, query_start_);
    Upload(std::vector<int32_t>(num_seqs, seq_len), seq_lens_);
    Upload(tables, tables_);
    args_.q = q_.as<float>();
    args_.q_stride = row_;
    args_.out = out_.as<float>();
    args_.out_stride = row_;
    args_.num_heads = kNumHeads;
    args_.cache = {k_.as<void>(), v_.as<void>(), DType::kBF16,
                   blocks_per_seq_ * num_seqs, kNumKvHeads, kBlockSize, kHeadDim};
    args_.num_seqs = num_seqs;
    args_.query_start = query_start_.as<int32_t>();
    args_.seq_lens = seq_lens_.as<int32_t>();
    args_.block_tables = tables_.as<int32_t>();
    args_.max_blocks_per_seq = blocks_per_seq_;
    args_.scale = 0.08838834764831845f;  // 1 / sqrt(128)
    // Row r of a sequence is at position seq_len - query_len + r and sees that many keys + 1.
    const double context = seq_len - query_len;
    keys_seen_ = num_seqs * (double(query_len) * context + double(query_len) * (query_len + 1) / 2);
  }

  const PagedAttentionArgs& args() const { return args_; }
  int32_t num_tokens() const { return num_tokens_; }
  double flops() const { return 4.0 * kHeadDim * kNumHeads * keys_seen_; }

 private:
  int32_t num_tokens_;
  int32_t blocks_per_seq_;
  int64_t row_;
  size_t cache_bytes_;
  DeviceBuffer q_, out_, k_, v_, query_start_, seq_lens_, tables_;
  PagedAttentionArgs args_;
  double keys_seen_ = 0.0;
};

// Times `launch` (which queues one kernel on `stream` and returns its launch error) and sets
// the TFLOPs and peak_fraction counters for `flops` per launch.
void TimeFlops(benchmark::State& state, double flops, cudaStream_t stream,
               const std::function<cudaError_t()>& launch) {
  const double total_seconds =
      bench::TimeLaunches(state, stream, 1, [&](int) { return launch(); });
  const double tflops = flops * state.iterations() / total_seconds / 1e12;
  state.counters["TFLOPs"] = tflops;
  state.counters["peak_fraction"] = tflops / kPeakTflops;
}

// Args: seq_len, query_len, num_seqs.
void BenchPrefill(benchmark::State& state, cudaStream_t stream) {
  const PrefillBatch batch(static_cast<int32_t>(state.range(0)),
                           static_cast<int32_t>(state.range(1)),
                           static_cast<int32_t>(state.range(2)));
  state.counters["tokens"] = batch.num_tokens();
  TimeFlops(state, batch.flops(), stream, [&] {
    return cuda::PrefillAttention(batch.args(), batch.num_tokens(), stream);
  });
}

void BenchPagedAttention(benchmark::State& state, cudaStream_t stream) {
  const PrefillBatch batch(static_cast<int32_t>(state.range(0)),
                           static_cast<int32_t>(state.range(1)),
                           static_cast<int32_t>(state.range(2)));
  state.counters["tokens"] = batch.num_tokens();
  TimeFlops(state, batch.flops(), stream, [&] {
    return cuda::PagedAttention(batch.args(), batch.num_tokens(), stream);
  });
}

void Register(cudaStream_t stream) {
  auto add = [stream](const char* name, void (*fn)(benchmark::State&, cudaStream_t)) {
    return benchmark::RegisterBenchmark(name, [fn, stream](benchmark::State& s) { fn(s, stream); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->ArgNames({"seq_len", "query_len", "seqs"});
  };
  add("PrefillAttention/llama3_8b/full", BenchPrefill)
      ->Args({512, 512, 8})
      ->Args({512, 512, 32})
      ->Args({2048, 2048, 2})
      ->Args({2048, 2048, 8})
      ->Args({4096, 4096, 1})
      ->Args({4096, 4096, 4})
      ->Args({8192, 8192, 1})
      ->Args({8192, 8192, 2});
  add("PrefillAttention/llama3_8b/chunk_after_6k", BenchPrefill)
      ->Args({8192, 2048, 2})
      ->Args({8192, 2048, 8});
  add("PagedAttention/llama3_8b/full", BenchPagedAttention)->Args({2048, 2048, 2});
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  return loom::bench::RunCudaBenchmarks(
      argc, argv, "cuda_prefill_attention_bench", [](const loom::bench::CudaBench& device) {
        benchmark::AddCustomContext("peak_tflops_reference", std::to_string(loom::kPeakTflops));
        loom::Register(device.stream);
      });
}
