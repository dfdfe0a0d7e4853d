// CPU decode attention over every KV cache format against the memory roofline (Google Benchmark).
//
//   BM_Roofline        DRAM read bandwidth (bench/common/memory_bandwidth.h: 1-8 streams per
//                      thread, best of 5) with 1 and 2 threads, measured first in the same run
//   BM_IntDotPeak      the packed formats' compute roof: multiply-adds per second of the integer
//                      dot instruction the selected level's kernel uses (vpdpbusd ymm with
//                      AVX512-VNNI, vpmaddubsw ymm on AVX2), independent chains per thread
//   BM_DecodeAttention one decode step's attention for one layer: `batch` sequences of `context`
//                      keys each, one query row per sequence, through cpu::PagedAttention (the
//                      decode path of kernels/cpu/attention_decode.h). Shapes: SmolLM2-like (9
//                      query heads over 3 KV heads, head_dim 64) and Llama-like (32 over 8, 128).
//   BM_DecodeAttentionResident  the same with one copy of the layer at 1K-2K context, small
//                      enough to stay in the caches: the kernel's compute alone, without DRAM.
//
// Counters: "bytes" read per call (K and V of every key once: codes, scales, zeros; element
// formats their elements), "GB/s" = bytes / time per call, "roof" = GB/s over the roofline with
// the same thread count, "vs_bf16" = bf16's time per call over this format's for the same shape,
// context, batch and threads (bf16 is registered first so it has run by then).
//
// The cache holds random bytes in 0x30..0x3f: valid, normal values in every format (bf16, f16,
// fp8, and codes with small f16 scales/zeros), because speed does not depend on the values. Small
// configurations cycle through as many copies of the layer as make 256 MiB, so the caches cannot
// serve them; block tables are shuffled, as a long-running pool's are. Block size 64 (a low-bit
// format's K group), and in a second set the engine's default (16 tokens; 32 for low-bit
// formats); sequence lengths are whole blocks, so no residual tail is read.
// JSON output (--benchmark_format=json) carries the CPU and the commit in its context.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench/common/memory_bandwidth.h"
#include "kernels/common/attention_args.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace loom::cpu {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int32_t kBlockSize = 64;
constexpr int64_t kMinSweepBytes = int64_t{256} << 20;

struct Shape {
  const char* name;
  int32_t num_heads, num_kv_heads, head_dim;
};
constexpr Shape kShapes[] = {{"smollm2", 9, 3, 64}, {"llama", 32, 8, 128}};

struct Format {
  const char* name;
  DType dtype;
  bool k_per_token;
};
// bf16 first: the speedups are relative to it.
constexpr Format kFormats[] = {{"bf16", DType::kBF16, false},      {"fp8", DType::kF8E4M3, false},
                               {"int8", DType::kKvInt8, false},    {"int4", DType::kKvInt4, false},
                               {"int2", DType::kKvInt2, false},    {"int4-ktok", DType::kKvInt4, true}};

ThreadPool& Pool(int num_threads) {
  static ThreadPool* pools[3] = {nullptr, new ThreadPool(1), new ThreadPool(2)};
  return *pools[num_threads];
}

// The measured read roofline per thread count (filled by BM_Roofline, which runs first).
double g_roof_gb_per_s[3] = {};
// bf16 time per call by (shape, context, batch, threads, resident).
std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>, double> g_bf16_seconds;

void BM_Roofline(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  bench::BandwidthResult result;
  for (auto _ : state) result = bench::MeasureReadBandwidth(Pool(threads), int64_t{1} << 30, 5);
  g_roof_gb_per_s[threads] = result.best_gb_per_s;
  state.counters["GB/s"] = result.best_gb_per_s;
  state.SetLabel("threads=" + std::to_string(threads) +
                 " streams=" + std::to_string(result.best_streams_per_thread));
}
BENCHMARK(BM_Roofline)->Arg(1)->Arg(2)->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);

// 12 chains of `steps` dependent integer dot instructions (32 multiply-adds each), in named
// registers (gcc renames an array of accumulators with a register move per chain and step);
// the sum keeps them live.
// vpdpbusd: the AVX-512 kernel's dot (AVX512-VNNI).
__attribute__((target("avx2,avx512vl,avx512vnni"))) int32_t DpbusdChains(int64_t steps) {
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  __m256i c0 = _mm256_set1_epi32(0), c1 = _mm256_set1_epi32(1), c2 = _mm256_set1_epi32(2);
  __m256i c3 = _mm256_set1_epi32(3), c4 = _mm256_set1_epi32(4), c5 = _mm256_set1_epi32(5);
  __m256i c6 = _mm256_set1_epi32(6), c7 = _mm256_set1_epi32(7), c8 = _mm256_set1_epi32(8);
  __m256i c9 = _mm256_set1_epi32(9), c10 = _mm256_set1_epi32(10), c11 = _mm256_set1_epi32(11);
  for (int64_t s = 0; s < steps; ++s) {
    c0 = _mm256_dpbusd_epi32(c0, a, b);
    c1 = _mm256_dpbusd_epi32(c1, a, b);
    c2 = _mm256_dpbusd_epi32(c2, a, b);
    c3 = _mm256_dpbusd_epi32(c3, a, b);
    c4 = _mm256_dpbusd_epi32(c4, a, b);
    c5 = _mm256_dpbusd_epi32(c5, a, b);
    c6 = _mm256_dpbusd_epi32(c6, a, b);
    c7 = _mm256_dpbusd_epi32(c7, a, b);
    c8 = _mm256_dpbusd_epi32(c8, a, b);
    c9 = _mm256_dpbusd_epi32(c9, a, b);
    c10 = _mm256_dpbusd_epi32(c10, a, b);
    c11 = _mm256_dpbusd_epi32(c11, a, b);
  }
  const __m256i x = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
  const __m256i y = _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7));
  const __m256i z = _mm256_add_epi32(_mm256_add_epi32(c8, c9), _mm256_add_epi32(c10, c11));
  return _mm256_extract_epi32(_mm256_add_epi32(x, _mm256_add_epi32(y, z)), 0);
}

// vpmaddubsw and the vpaddw that adds its pairs into the int16 sum: the AVX2 kernel's dot, whose
// products do not depend on the sum. Each of the 6 chains has its own operand, which an empty
// asm statement marks as changed every step so no product is hoisted out of the loop or shared
// (6 chains: operands and sums fit AVX2's 16 registers; the adds have latency 1).
__attribute__((target("avx2"))) int32_t MaddubsChains(int64_t steps) {
  const __m256i b = _mm256_set1_epi8(-2);
  __m256i x0 = _mm256_set1_epi8(1), x1 = _mm256_set1_epi8(2), x2 = _mm256_set1_epi8(3);
  __m256i x3 = _mm256_set1_epi8(4), x4 = _mm256_set1_epi8(5), x5 = _mm256_set1_epi8(6);
  __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  for (int64_t s = 0; s < steps; ++s) {
    asm volatile("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5));
    c0 = _mm256_add_epi16(c0, _mm256_maddubs_epi16(x0, b));
    c1 = _mm256_add_epi16(c1, _mm256_maddubs_epi16(x1, b));
    c2 = _mm256_add_epi16(c2, _mm256_maddubs_epi16(x2, b));
    c3 = _mm256_add_epi16(c3, _mm256_maddubs_epi16(x3, b));
    c4 = _mm256_add_epi16(c4, _mm256_maddubs_epi16(x4, b));
    c5 = _mm256_add_epi16(c5, _mm256_maddubs_epi16(x5, b));
  }
  const __m256i x = _mm256_add_epi16(_mm256_add_epi16(c0, c1), _mm256_add_epi16(c2, c3));
  return _mm256_extract_epi16(_mm256_add_epi16(x, _mm256_add_epi16(c4, c5)), 0);
}

void BM_IntDotPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const bool vnni = static_cast<int>(SelectedIsa()) >= static_cast<int>(Isa::kAvx512);
  if (SelectedIsa() == Isa::kScalar) {
    state.SkipWithError("no AVX2");
    return;
  }
  constexpr int64_t kSteps = 1 << 22;
  int32_t sink[2] = {};
  const auto begin = Clock::now();
  for (auto _ : state) {
    Pool(threads).ParallelFor(threads, [&](int64_t t, int64_t, int) {
      // Either way 12 * kSteps instructions of 32 multiply-adds.
      sink[t] += vnni ? DpbusdChains(kSteps) : MaddubsChains(2 * kSteps);
    });
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  benchmark::DoNotOptimize(sink);
  state.counters["Gmac/s"] = 12.0 * 32 * kSteps * threads * state.iterations() / seconds / 1e9;
  state.SetLabel(std::string(vnni ? "vpdpbusd" : "vpmaddubsw+vpaddw") +
                 " threads=" + std::to_string(threads));
}
BENCHMARK(BM_IntDotPeak)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// One buffer, grown on demand and filled once, that every configuration's layers live in. As the
// engine's KV pool (engine/kv/kv_pool.cc): on huge-page boundaries with the huge-page hint, so
// that the kernel reads the 2 MiB pages the engine's cache has where the kernel grants them.
class Arena {
 public:
  uint8_t* Get(int64_t bytes) {
    if (bytes > bytes_) {
      constexpr int64_t kHugePage = int64_t{2} << 20;
      std::free(data_);
      bytes_ = (bytes + kHugePage - 1) / kHugePage * kHugePage;
      data_ = static_cast<uint8_t*>(std::aligned_alloc(kHugePage, bytes_));
      madvise(data_, bytes_, MADV_HUGEPAGE);
      std::minstd_rand rng(11);
      for (int64_t i = 0; i < bytes_; i += 4) {
        const uint32_t r = static_cast<uint32_t>(rng());
        // Four bytes in 0x30..0x3f.
        const uint32_t word = 0x30303030u | (r & 0x0f0f0f0fu);
        std::memcpy(data_ + i, &word, 4);
      }
    }
    return data_;
  }

 private:
  uint8_t* data_ = nullptr;
  int64_t bytes_ = 0;
};

Arena& TheArena() {
  static Arena* arena = new Arena;
  return *arena;
}

// Bytes of one (block, KV head) of K, and of V.
int64_t HeadBlockBytes(const Shape& shape, const Format& format, int32_t block_size, bool is_v) {
  if (IsLowBitKvDType(format.dtype)) {
    const KvPackedLayout layout{TraitsOf(format.dtype).kv_code_bits, block_size, shape.head_dim,
                                format.k_per_token};
    return is_v ? layout.v_head_bytes() : layout.k_head_bytes();
  }
  return int64_t{block_size} * shape.head_dim * static_cast<int64_t>(DTypeSize(format.dtype));
}

std::string CommandOutput(const std::string& command) {
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[256];
    while (fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
    pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Args: shape, context, batch, threads, format, block size. `resident`: one copy of the layer,
// read again and again from the caches, instead of as many copies as make kMinSweepBytes.
void RunDecodeAttention(benchmark::State& state, bool resident) {
  const Shape& shape = kShapes[state.range(0)];
  const int32_t context = static_cast<int32_t>(state.range(1));
  const int32_t batch = static_cast<int32_t>(state.range(2));
  const int threads = static_cast<int>(state.range(3));
  const Format& format = kFormats[state.range(4)];
  const int32_t block_size = static_cast<int32_t>(state.range(5));

  const int32_t blocks_per_seq = context / block_size;
  const int32_t blocks_per_layer = blocks_per_seq * batch;
  const int64_t head_blocks = int64_t{blocks_per_layer} * shape.num_kv_heads;
  const int64_t k_region_bytes = head_blocks * HeadBlockBytes(shape, format, block_size, false);
  const int64_t layer_bytes =
      k_region_bytes + head_blocks * HeadBlockBytes(shape, format, block_size, true);
  const int32_t num_layers =
      resident ? 1
               : static_cast<int32_t>(
                     std::max<int64_t>(1, (kMinSweepBytes + layer_bytes - 1) / layer_bytes));
  uint8_t* arena = TheArena().Get(layer_bytes * num_layers);

  std::mt19937 rng(3);
  std::vector<int32_t> tables(static_cast<size_t>(blocks_per_layer));
  for (int32_t b = 0; b < blocks_per_layer; ++b) tables[b] = b;
  std::shuffle(tables.begin(), tables.end(), rng);
  std::vector<int32_t> query_start(batch + 1), seq_lens(batch, context), tail_slots(batch);
  for (int32_t s = 0; s <= batch; ++s) query_start[s] = s;
  for (int32_t s = 0; s < batch; ++s) tail_slots[s] = s;
  std::vector<uint16_t> tails(size_t(batch) * shape.num_kv_heads * block_size * shape.head_dim,
                              0x3c00);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t q_stride = int64_t{shape.num_heads} * shape.head_dim;
  std::vector<float> q(size_t(batch) * q_stride), out(q.size());
  for (float& x : q) x = dist(rng);

  PagedAttentionArgs args;
  args.q = q.data();
  args.q_stride = q_stride;
  args.out = out.data();
  args.out_stride = q_stride;
  args.num_heads = shape.num_heads;
  args.cache.dtype = format.dtype;
  args.cache.num_blocks = blocks_per_layer;
  args.cache.num_kv_heads = shape.num_kv_heads;
  args.cache.block_size = block_size;
  args.cache.head_dim = shape.head_dim;
  args.cache.k_per_token = format.k_per_token;
  args.cache.code_order = cpu::kKvCodeOrder;
  args.cache.tail_k = tails.data();
  args.cache.tail_v = tails.data();
  args.cache.num_tail_slots = batch;
  args.num_seqs = batch;
  args.query_start = query_start.data();
  args.seq_lens = seq_lens.data();
  args.block_tables = tables.data();
  args.max_blocks_per_seq = blocks_per_seq;
  args.tail_slots = tail_slots.data();
  args.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  args.num_tokens = batch;
  args.min_query_len = 1;
  args.max_query_len = 1;
  // K region then V region of each layer (element formats: the same block-major layout).
  auto point_at_layer = [&](int32_t layer) {
    args.cache.k = arena + int64_t{layer} * layer_bytes;
    args.cache.v = arena + int64_t{layer} * layer_bytes + k_region_bytes;
  };

  ThreadPool& pool = Pool(threads);
  const size_t workspace_bytes = PagedAttentionWorkspaceBytes(args, threads);
  uint8_t* workspace_data =
      static_cast<uint8_t*>(std::aligned_alloc(64, (workspace_bytes + 63) / 64 * 64 + 64));
  std::unique_ptr<uint8_t, decltype(&std::free)> workspace(workspace_data, &std::free);
  int32_t layer = 0;
  point_at_layer(0);
  PagedAttention(pool, args, workspace.get());  // warm-up: page faults, thread start
  const auto begin = Clock::now();
  for (auto _ : state) {
    layer = (layer + 1) % num_layers;
    point_at_layer(layer);
    PagedAttention(pool, args, workspace.get());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count() /
                         static_cast<double>(state.iterations());
  const double gb_per_s = static_cast<double>(layer_bytes) / seconds / 1e9;
  state.counters["bytes"] = static_cast<double>(layer_bytes);
  state.counters["GB/s"] = gb_per_s;
  if (g_roof_gb_per_s[threads] > 0) state.counters["roof"] = gb_per_s / g_roof_gb_per_s[threads];
  // bf16 of the same set ran last: at 64 for the first set, at 16 for the engine's defaults.
  const auto key = std::make_tuple(state.range(0), state.range(1), state.range(2), state.range(3),
                                   resident);
  if (format.dtype == DType::kBF16 && !format.k_per_token) g_bf16_seconds[key] = seconds;
  if (auto it = g_bf16_seconds.find(key); it != g_bf16_seconds.end()) {
    state.counters["vs_bf16"] = it->second / seconds;
  }
  state.SetLabel(std::string(shape.name) + " " + format.name + " ctx=" + std::to_string(context) +
                 " batch=" + std::to_string(batch) + " threads=" + std::to_string(threads) +
                 " block=" + std::to_string(block_size) + " layers=" + std::to_string(num_layers) +
                 (resident ? " resident" : ""));
}

void BM_DecodeAttention(benchmark::State& state) { RunDecodeAttention(state, false); }
void BM_DecodeAttentionResident(benchmark::State& state) { RunDecodeAttention(state, true); }

BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{0, 1}, {1024, 2048, 4096, 8192, 16384, 32768}, {1, 8}, {1, 2},
                   {0, 1, 2, 3, 4, 5}, {kBlockSize}})
    ->UseRealTime()
    ->MinTime(0.2)
    ->Unit(benchmark::kMillisecond);
// The engine's default block sizes: 16 tokens for the element formats (bf16 first: vs_bf16 of the
// low-bit formats compares with bf16 at 16), 32 for the low-bit ones.
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{0, 1}, {4096, 32768}, {1, 8}, {1, 2}, {0, 1}, {16}})
    ->UseRealTime()
    ->MinTime(0.2)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{0, 1}, {4096, 32768}, {1, 8}, {1, 2}, {2, 3, 4, 5}, {32}})
    ->UseRealTime()
    ->MinTime(0.2)
    ->Unit(benchmark::kMillisecond);
// In the caches: the Llama shape's bf16 layer at 1K is 4 MiB, its int4 layer 1.1 MiB.
BENCHMARK(BM_DecodeAttentionResident)
    ->ArgsProduct({{0, 1}, {1024, 2048}, {1}, {1}, {0, 1, 2, 3, 4, 5}, {kBlockSize}})
    ->UseRealTime()
    ->MinTime(0.2)
    ->Unit(benchmark::kMillisecond);
// 128K context, one sequence (the Llama shape's bf16 layer is 512 MiB).
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{0, 1}, {131072}, {1}, {1, 2}, {0, 1, 2, 3, 4, 5}, {kBlockSize}})
    ->UseRealTime()
    ->MinTime(0.2)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace loom::cpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cpu", loom::cpu::DescribeCpu());
  benchmark::AddCustomContext(
      "commit", loom::cpu::CommandOutput(std::string("git -C ") + LOOM_SOURCE_DIR +
                                         " rev-parse --short HEAD 2>/dev/null"));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
