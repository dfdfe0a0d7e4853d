// CPU matmul against its rooflines (Google Benchmark).
//
//   BM_ReadRoofline  DRAM read bandwidth with 1, 4 or 8 concurrent streams per thread: the GEMV
//                    roof (bench/common/memory_bandwidth.h sweeps more shapes of the read)
//   BM_FmaPeak       f32 FMA throughput of 12 independent register chains: the GEMM roof without
//                    AMX (AVX2 ymm, or AVX-512 zmm where the selected level has it)
//   BM_Bf16DotPeak   vdpbf16ps throughput of 12 chains: the roof of the AVX512-BF16 GEMM (kBf16)
//   BM_AmxPeak       TDPBF16PS throughput with every operand in tile registers: the roof of the
//                    AMX GEMM (bf16 weights; kHighest issues three per weight tile, kBf16 one)
//   BM_AmxFed        the same block with its four operand tiles loaded per step from L1 or L2, as
//                    the tile GEMM loads them: the roof of a 2×2 tile GEMM
//   BM_Gemv          m = 1 on one 1.1B-shaped weight; GB/s = weight bytes / time
//   BM_GemvSweep     m = 1..8 over a model's worth (> 1 GiB) of weights, layer after layer as a
//                    decode step runs them (q/k/v and gate/up as groups), so caches cannot help;
//                    bf16 also at MatmulPrecision::kBf16 (m = 1: the vdpbf16ps GEMV on
//                    AVX512-BF16)
//   BM_Gemm          m in {16, 64, 128, 512} on the same shapes; GFLOP/s = 2 m n k / time, per
//                    precision where it matters (AMX, and AVX-512's bf16 dot products)
//   BM_PathCrossover GEMV and GEMM paths forced at m = 1..16: where MatmulGemvMaxM comes from
//
// Shapes are the 1.1B (TinyLlama) linear layers: q/o 2048×2048, k/v 256×2048, gate/up 5632×2048,
// down 2048×5632. Counters are computed from wall time (the pool's threads do the work), so the
// JSON output (--benchmark_format=json) carries "GB/s" or "GFLOP/s" directly. The instruction
// set follows LOOM_CPU_ISA like the engine; the context line names the CPU and the level used.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/common/memory_bandwidth.h"
#include "kernels/common/dtype.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace loom::cpu {
namespace {

using Clock = std::chrono::steady_clock;

struct LayerShape {
  const char* name;
  int64_t n;
  int64_t k;
};
constexpr LayerShape kShapes[] = {
    {"q_o", 2048, 2048}, {"k_v", 256, 2048}, {"gate_up", 5632, 2048}, {"down", 2048, 5632}};
constexpr DType kDTypes[] = {DType::kBF16, DType::kF16, DType::kF32};

ThreadPool& Pool(int num_threads) {
  static ThreadPool* pools[3] = {nullptr, new ThreadPool(1), new ThreadPool(2)};
  return *pools[num_threads];
}

// A zero-initialised allocation that is not repacked or touched by the timing. As the engine
// holds weights (engine/weights/file_mapping.h, weight_memory "anonymous"): on huge-page
// boundaries with the huge-page hint, so that the kernels read 2 MiB pages where the kernel
// grants them (4 KiB pages cost the Zen 4 and Xeon GEMVs 6-10 %).
class Buffer {
 public:
  explicit Buffer(size_t bytes)
      : data_(static_cast<uint8_t*>(std::aligned_alloc(kHugePageBytes, Rounded(bytes)))),
        bytes_(bytes) {
    madvise(data_, Rounded(bytes), MADV_HUGEPAGE);
    std::memset(data_, 0, Rounded(bytes));
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  static constexpr size_t kHugePageBytes = size_t{2} << 20;
  static size_t Rounded(size_t bytes) {
    return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  }

  uint8_t* data_;
  size_t bytes_;
};

// Weights like a checkpoint's: small values, stored in `dtype` (filled by a cheap generator).
void FillWeights(Buffer& buffer, DType dtype, uint32_t seed) {
  std::minstd_rand rng(seed);
  const size_t count = buffer.bytes() / DTypeSize(dtype);
  for (size_t i = 0; i < count; ++i) {
    const float v = (static_cast<float>(rng() % 2001) - 1000.0f) * 2e-5f;
    StoreFromF32(buffer.data(), dtype, i, v);
  }
}

std::vector<float> RandomX(int64_t m, int64_t k) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = dist(rng);
  return x;
}

double Seconds(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double>(end - begin).count();
}

void Check(benchmark::State& state, MatmulStatus status) {
  if (status != MatmulStatus::kOk)
    state.SkipWithError(std::string(MatmulStatusName(status)).c_str());
}

// Reads a 1 GiB buffer; each thread reads its half as 1, 4 or 8 concurrent streams.
void BM_ReadRoofline(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int streams = static_cast<int>(state.range(1));
  static Buffer buffer(size_t{1} << 30);
  const int64_t slice = static_cast<int64_t>(buffer.bytes()) / threads;
  uint64_t sink[2] = {};
  const auto begin = Clock::now();
  for (auto _ : state) {
    Pool(threads).ParallelFor(threads, [&](int64_t t, int64_t, int) {
      const uint8_t* base = buffer.data() + t * slice;
      sink[t] += bench::ReadStreams(base, slice, streams);
    });
  }
  const double seconds = Seconds(begin, Clock::now());
  benchmark::DoNotOptimize(sink);
  state.counters["GB/s"] = static_cast<double>(buffer.bytes()) * state.iterations() / seconds / 1e9;
  state.SetLabel("threads=" + std::to_string(threads) + " streams=" + std::to_string(streams));
}
BENCHMARK(BM_ReadRoofline)
    ->ArgsProduct({{1, 2}, {1, 4, 8}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// 12 independent FMA chains per thread on 8 (AVX2) or 16 (AVX-512) lanes; 2 flops per lane.
__attribute__((target("avx2,fma"))) float FmaChainsAvx2(int64_t steps) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm256_add_ps(sum, acc[i]);
  return _mm256_cvtss_f32(sum);
}
__attribute__((target("avx512f"))) float FmaChainsAvx512(int64_t steps) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  return lanes[0] + lanes[15];
}

// 12 independent vdpbf16ps chains: 32 multiply-adds (64 flops) per instruction. The roof of the
// AVX512-BF16 GEMM.
__attribute__((target("avx512f,avx512bf16"))) float Bf16DotChains(int64_t steps) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);  // (0.996, 0.996)
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3a833a83);  // (1e-3, 1e-3)
  for (int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  return lanes[0] + lanes[15];
}

// Runs chains(steps) once on each of `threads` threads per iteration; GFLOP/s counts
// `flops_per_step` per step and thread.
template <typename Chains>
void TimeChains(benchmark::State& state, int threads, int64_t steps, double flops_per_step,
                Chains chains, const std::string& label) {
  float sink[2] = {};
  const auto begin = Clock::now();
  for (auto _ : state) {
    Pool(threads).ParallelFor(threads, [&](int64_t t, int64_t, int) { sink[t] += chains(steps); });
  }
  const double seconds = Seconds(begin, Clock::now());
  benchmark::DoNotOptimize(sink);
  state.counters["GFLOP/s"] =
      flops_per_step * static_cast<double>(steps) * threads * state.iterations() / seconds / 1e9;
  state.SetLabel(label + " threads=" + std::to_string(threads));
}

void BM_Bf16DotPeak(benchmark::State& state) {
  if (static_cast<int>(SelectedIsa()) < static_cast<int>(Isa::kAvx512)) {
    state.SkipWithError("no AVX512-BF16");
    return;
  }
  TimeChains(state, static_cast<int>(state.range(0)), 1 << 22, 2.0 * 12 * 32, Bf16DotChains,
             "avx512-bf16");
}
BENCHMARK(BM_Bf16DotPeak)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// All eight tiles 16 rows × 64 bytes, accumulators tmm0-3 zeroed.
void StartTileBlock() {
  amx::TileConfig config;
  std::memset(&config, 0, sizeof(config));
  config.palette_id = 1;
  for (int t = 0; t < amx::kNumTiles; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  amx::TileLoadConfig(config);
  amx::TileZero<0>();
  amx::TileZero<1>();
  amx::TileZero<2>();
  amx::TileZero<3>();
}

// Stores the accumulators, releases the tiles and returns a few of the sums (kept live).
float FinishTileBlock() {
  alignas(64) float c[4][256];
  amx::TileStore<0>(c[0], 64);
  amx::TileStore<1>(c[1], 64);
  amx::TileStore<2>(c[2], 64);
  amx::TileStore<3>(c[3], 64);
  amx::TileRelease();
  return c[0][0] + c[1][17] + c[2][100] + c[3][255];
}

// The tile GEMM's 2×2 block with nothing loaded in the loop: accumulators tmm0-3, weight tiles
// tmm4-5, x tiles tmm6-7; each TDPBF16PS is 16 × 16 × 32 multiply-adds (16384 flops).
float AmxChains(int64_t steps) {
  StartTileBlock();
  alignas(64) uint16_t a[512], b[512];
  for (int i = 0; i < 512; ++i) {
    a[i] = 0x3f7f;  // 0.996
    b[i] = 0x3a83;  // 1e-3
  }
  amx::TileLoad<4>(a, 64);
  amx::TileLoad<5>(a, 64);
  amx::TileLoad<6>(b, 64);
  amx::TileLoad<7>(b, 64);
  for (int64_t s = 0; s < steps; ++s) {
    amx::TileDpBf16<0, 4, 6>();
    amx::TileDpBf16<1, 4, 7>();
    amx::TileDpBf16<2, 5, 6>();
    amx::TileDpBf16<3, 5, 7>();
  }
  return FinishTileBlock();
}

void BM_AmxPeak(benchmark::State& state) {
  if (SelectedIsa() != Isa::kAmx) {
    state.SkipWithError("no AMX");
    return;
  }
  TimeChains(state, static_cast<int>(state.range(0)), 1 << 20, 2.0 * 4 * 16 * 16 * 32, AmxChains,
             "amx-bf16");
}
BENCHMARK(BM_AmxPeak)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// The same 2×2 block fed as the tile GEMM feeds it: each step loads two weight tiles and two x
// tiles (four 1 KiB loads for four products), cycling through a weight buffer and an x buffer of
// the given sizes, so the operands come from L1 (16 KiB each) or from L2 (1 MiB). Against
// BM_AmxPeak in the same run this is the roof of a 2×2 tile GEMM, whose eight tiles leave no
// room to use a loaded tile for more than two products.
float AmxFedChains(const uint16_t* w, int64_t w_tiles, const uint16_t* x, int64_t x_tiles,
                   int64_t steps) {
  StartTileBlock();
  int64_t wt = 0, xt = 0;
  for (int64_t s = 0; s < steps; ++s) {
    amx::TileLoad<4>(w + wt * 512, 64);
    amx::TileLoad<5>(w + (wt + 1) * 512, 64);
    amx::TileLoad<6>(x + xt * 512, 64);
    amx::TileLoad<7>(x + (xt + 1) * 512, 64);
    amx::TileDpBf16<0, 4, 6>();
    amx::TileDpBf16<1, 4, 7>();
    amx::TileDpBf16<2, 5, 6>();
    amx::TileDpBf16<3, 5, 7>();
    wt = wt + 2 < w_tiles ? wt + 2 : 0;
    xt = xt + 2 < x_tiles ? xt + 2 : 0;
  }
  return FinishTileBlock();
}

// Args: weight buffer KiB, x buffer KiB (1 KiB tiles, an even number of each), threads.
void BM_AmxFed(benchmark::State& state) {
  if (SelectedIsa() != Isa::kAmx) {
    state.SkipWithError("no AMX");
    return;
  }
  const int64_t w_tiles = state.range(0), x_tiles = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  // Each thread its own weight and x buffers, of random bf16 in [-1, 1).
  std::vector<std::vector<uint16_t>> buffers(2 * static_cast<size_t>(threads));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < buffers.size(); ++i) {
    buffers[i].resize(static_cast<size_t>((i % 2 == 0 ? w_tiles : x_tiles) * 512));
    for (uint16_t& v : buffers[i]) {
      const float f = dist(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof(bits));
      v = static_cast<uint16_t>(bits >> 16);
    }
  }
  constexpr int64_t kSteps = 1 << 18;
  float sink[2] = {};
  const auto begin = Clock::now();
  for (auto _ : state) {
    Pool(threads).ParallelFor(threads, [&](int64_t t, int64_t, int) {
      sink[t] += AmxFedChains(buffers[2 * t].data(), w_tiles, buffers[2 * t + 1].data(), x_tiles,
                              kSteps);
    });
  }
  const double seconds = Seconds(begin, Clock::now());
  benchmark::DoNotOptimize(sink);
  state.counters["GFLOP/s"] =
      2.0 * 4 * 16 * 16 * 32 * kSteps * threads * state.iterations() / seconds / 1e9;
  state.SetLabel("amx-bf16 fed, weight " + std::to_string(w_tiles) + " KiB, x " +
                 std::to_string(x_tiles) + " KiB, threads=" + std::to_string(threads));
}
BENCHMARK(BM_AmxFed)
    ->ArgsProduct({{16}, {16, 1024}, {1, 2}})
    ->ArgsProduct({{1024}, {1024}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_FmaPeak(benchmark::State& state) {
  if (SelectedIsa() == Isa::kScalar) {
    state.SkipWithError("no AVX2");
    return;
  }
  const bool avx512 = static_cast<int>(SelectedIsa()) >= static_cast<int>(Isa::kAvx512);
  TimeChains(state, static_cast<int>(state.range(0)), 1 << 22, 2.0 * 12 * (avx512 ? 16 : 8),
             avx512 ? FmaChainsAvx512 : FmaChainsAvx2, avx512 ? "avx512" : "avx2");
}
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// Args: dtype index, shape index, threads.
void BM_Gemv(benchmark::State& state) {
  const DType dtype = kDTypes[state.range(0)];
  const LayerShape& shape = kShapes[state.range(1)];
  const int threads = static_cast<int>(state.range(2));
  Buffer weight(static_cast<size_t>(shape.n * shape.k) * DTypeSize(dtype));
  FillWeights(weight, dtype, 1);
  const std::vector<float> x = RandomX(1, shape.k);
  std::vector<float> y(static_cast<size_t>(shape.n));
  const MatmulInput in{x.data(), 1, shape.k, shape.k};
  const MatmulProjection proj{weight.data(), dtype, shape.n, nullptr, y.data(), shape.n};
  std::vector<uint8_t> workspace(MatmulWorkspaceBytes(1, shape.k, threads));
  const auto begin = Clock::now();
  for (auto _ : state) {
    Check(state, Matmul(in, proj, Pool(threads), workspace.data(), workspace.size()));
  }
  const double seconds = Seconds(begin, Clock::now());
  state.counters["GB/s"] = static_cast<double>(weight.bytes()) * state.iterations() / seconds / 1e9;
  state.SetLabel(std::string(DTypeName(dtype)) + " " + shape.name +
                 " threads=" + std::to_string(threads));
}
BENCHMARK(BM_Gemv)
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2, 3}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The weights of whole decoder layers, enough layers to exceed 1 GiB of the given dtype.
struct ModelWeights {
  static constexpr int64_t kHidden = 2048, kKv = 256, kFfn = 5632;
  DType dtype;
  int num_layers;
  std::vector<Buffer*> q, k, v, o, gate, up, down;
  size_t bytes = 0;

  explicit ModelWeights(DType d) : dtype(d) {
    const size_t layer_elems = 2 * kHidden * kHidden + 2 * kKv * kHidden + 3 * kFfn * kHidden;
    num_layers = static_cast<int>((size_t{1} << 30) / (layer_elems * DTypeSize(d)) + 1);
    uint32_t seed = 1;
    auto make = [&](int64_t n, int64_t k) {
      auto* b = new Buffer(static_cast<size_t>(n * k) * DTypeSize(d));
      FillWeights(*b, d, seed++);
      bytes += b->bytes();
      return b;
    };
    for (int l = 0; l < num_layers; ++l) {
      q.push_back(make(kHidden, kHidden));
      k.push_back(make(kKv, kHidden));
      v.push_back(make(kKv, kHidden));
      o.push_back(make(kHidden, kHidden));
      gate.push_back(make(kFfn, kHidden));
      up.push_back(make(kFfn, kHidden));
      down.push_back(make(kHidden, kFfn));
    }
  }
};

ModelWeights& Model(DType dtype) {
  static ModelWeights* models[3] = {};
  const int index = dtype == DType::kBF16 ? 0 : dtype == DType::kF16 ? 1 : 2;
  if (models[index] == nullptr) models[index] = new ModelWeights(dtype);
  return *models[index];
}

// One decode step's matmuls over all layers (attention and activations left out).
MatmulStatus RunSweep(ModelWeights& w, int64_t m, const float* x_hidden, const float* x_ffn,
                      float* y_qkv, float* y_ffn, float* y_out, ThreadPool& pool,
                      std::vector<uint8_t>& ws, const MatmulOptions& options) {
  constexpr int64_t kH = ModelWeights::kHidden, kKv = ModelWeights::kKv, kF = ModelWeights::kFfn;
  const MatmulInput hidden{x_hidden, m, kH, kH};
  const MatmulInput ffn{x_ffn, m, kF, kF};
  MatmulStatus status = MatmulStatus::kOk;
  for (int l = 0; l < w.num_layers && status == MatmulStatus::kOk; ++l) {
    const MatmulProjection qkv[3] = {
        {w.q[l]->data(), w.dtype, kH, nullptr, y_qkv, kH + 2 * kKv},
        {w.k[l]->data(), w.dtype, kKv, nullptr, y_qkv + kH, kH + 2 * kKv},
        {w.v[l]->data(), w.dtype, kKv, nullptr, y_qkv + kH + kKv, kH + 2 * kKv}};
    const MatmulProjection gate_up[2] = {
        {w.gate[l]->data(), w.dtype, kF, nullptr, y_ffn, 2 * kF},
        {w.up[l]->data(), w.dtype, kF, nullptr, y_ffn + kF, 2 * kF}};
    const MatmulStatus statuses[4] = {
        MatmulGroup(hidden, qkv, pool, ws.data(), ws.size(), options),
        Matmul(hidden, {w.o[l]->data(), w.dtype, kH, nullptr, y_out, kH}, pool, ws.data(),
               ws.size(), options),
        MatmulGroup(hidden, gate_up, pool, ws.data(), ws.size(), options),
        Matmul(ffn, {w.down[l]->data(), w.dtype, kH, nullptr, y_out, kH}, pool, ws.data(),
               ws.size(), options)};
    for (MatmulStatus s : statuses) status = s != MatmulStatus::kOk ? s : status;
  }
  return status;
}

// Args: dtype index, threads, m, precision (0 highest, 1 bf16; the second for bf16 weights only,
// where AVX-512 then takes the vdpbf16ps GEMV), and the f32 GEMV's layout (GemvLayout: 0 the CPU's
// choice, 6 kZen4 (6 runs on AVX-512), 8 kSapphireRapids (8 runs on AVX-512 up to m = 3)).
void BM_GemvSweep(benchmark::State& state) {
  const DType dtype = kDTypes[state.range(0)];
  const int threads = static_cast<int>(state.range(1));
  const int64_t m = state.range(2);
  MatmulOptions options;
  options.precision = state.range(3) == 1 ? MatmulPrecision::kBf16 : MatmulPrecision::kHighest;
  const int64_t layout = state.range(4);
  options.gemv_layout = layout == 6   ? GemvLayout::kZen4
                        : layout == 8 ? GemvLayout::kSapphireRapids
                                      : GemvLayout::kAuto;
  ModelWeights& w = Model(dtype);
  const std::vector<float> x_hidden = RandomX(m, ModelWeights::kHidden);
  const std::vector<float> x_ffn = RandomX(m, ModelWeights::kFfn);
  std::vector<float> y_qkv(
      static_cast<size_t>(m * (ModelWeights::kHidden + 2 * ModelWeights::kKv)));
  std::vector<float> y_ffn(static_cast<size_t>(m * 2 * ModelWeights::kFfn));
  std::vector<float> y_out(static_cast<size_t>(m * ModelWeights::kHidden));
  std::vector<uint8_t> ws(MatmulWorkspaceBytes(m, ModelWeights::kFfn, threads, options));
  const auto begin = Clock::now();
  for (auto _ : state) {
    Check(state, RunSweep(w, m, x_hidden.data(), x_ffn.data(), y_qkv.data(), y_ffn.data(),
                          y_out.data(), Pool(threads), ws, options));
  }
  const double seconds = Seconds(begin, Clock::now());
  state.counters["GB/s"] = static_cast<double>(w.bytes) * state.iterations() / seconds / 1e9;
  state.SetLabel(std::string(DTypeName(dtype)) + " " + std::to_string(w.num_layers) + " layers " +
                 std::to_string(w.bytes >> 20) + " MiB m=" + std::to_string(m) +
                 " threads=" + std::to_string(threads) +
                 (state.range(3) == 1 ? " precision=bf16" : "") +
                 (layout == 6 ? " layout=zen4" : layout == 8 ? " layout=spr" : ""));
}
BENCHMARK(BM_GemvSweep)
    ->ArgsProduct({{0, 1, 2}, {1, 2}, {1}, {0}, {0}})
    ->ArgsProduct({{0}, {2}, {2, 4, 8, 12, 16, 24, 32}, {0}, {0}})
    ->ArgsProduct({{0}, {1, 2}, {1, 2}, {1}, {0}})
    ->ArgsProduct({{0, 1}, {1, 2}, {1, 2, 3, 4, 8, 16}, {0}, {6, 8}})
    ->UseRealTime()
    ->MinTime(2.0)
    ->Unit(benchmark::kMillisecond);

// Args: dtype index, shape index, m, threads, precision (0 highest, 1 bf16).
void BM_Gemm(benchmark::State& state) {
  const DType dtype = kDTypes[state.range(0)];
  const LayerShape& shape = kShapes[state.range(1)];
  const int64_t m = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const MatmulOptions options{
      .precision = state.range(4) == 0 ? MatmulPrecision::kHighest : MatmulPrecision::kBf16,
      .path = MatmulPath::kGemm,
      .isa = std::nullopt};
  Buffer weight(static_cast<size_t>(shape.n * shape.k) * DTypeSize(dtype));
  FillWeights(weight, dtype, 2);
  const std::vector<float> x = RandomX(m, shape.k);
  std::vector<float> y(static_cast<size_t>(m * shape.n));
  std::vector<uint8_t> workspace(MatmulWorkspaceBytes(m, shape.k, threads, options));
  const MatmulInput in{x.data(), m, shape.k, shape.k};
  const MatmulProjection proj{weight.data(), dtype, shape.n, nullptr, y.data(), shape.n};
  const auto begin = Clock::now();
  for (auto _ : state) {
    Check(state, Matmul(in, proj, Pool(threads), workspace.data(), workspace.size(), options));
  }
  const double seconds = Seconds(begin, Clock::now());
  state.counters["GFLOP/s"] =
      2.0 * static_cast<double>(m * shape.n * shape.k) * state.iterations() / seconds / 1e9;
  state.SetLabel(std::string(DTypeName(dtype)) + " " + shape.name + " m=" + std::to_string(m) +
                 " threads=" + std::to_string(threads) +
                 (options.precision == MatmulPrecision::kHighest ? " highest" : " bf16"));
}

// Precision changes the AMX path and the AVX-512 bf16 GEMM (vdpbf16ps at kBf16); elsewhere both
// would measure the same code.
void GemmArgs(benchmark::internal::Benchmark* b) {
  const bool bf16_units = static_cast<int>(SelectedIsa()) >= static_cast<int>(Isa::kAvx512);
  for (int64_t precision : {0, 1}) {
    if (precision == 1 && !bf16_units) continue;
    for (int64_t dtype : {0, 1, 2}) {
      for (int64_t shape : {0, 1, 2, 3}) {
        for (int64_t m : {16, 64, 128, 512}) {
          for (int64_t threads : {1, 2}) b->Args({dtype, shape, m, threads, precision});
        }
      }
    }
  }
}
BENCHMARK(BM_Gemm)->Apply(GemmArgs)->UseRealTime()->Unit(benchmark::kMillisecond);

// Args: m, path (1 GEMV, 2 GEMM). bf16 2048×2048 on 2 threads.
void BM_PathCrossover(benchmark::State& state) {
  const int64_t m = state.range(0);
  const MatmulOptions options{.path = static_cast<MatmulPath>(state.range(1)), .isa = std::nullopt};
  const int64_t n = 2048, k = 2048;
  Buffer weight(static_cast<size_t>(n * k) * 2);
  FillWeights(weight, DType::kBF16, 3);
  const std::vector<float> x = RandomX(m, k);
  std::vector<float> y(static_cast<size_t>(m * n));
  std::vector<uint8_t> workspace(MatmulWorkspaceBytes(m, k, 2, options));
  const auto begin = Clock::now();
  for (auto _ : state) {
    Check(state, Matmul({x.data(), m, k, k}, {weight.data(), DType::kBF16, n, nullptr, y.data(), n},
                        Pool(2), workspace.data(), workspace.size(), options));
  }
  const double seconds = Seconds(begin, Clock::now());
  state.counters["GFLOP/s"] =
      2.0 * static_cast<double>(m * n * k) * state.iterations() / seconds / 1e9;
  state.SetLabel(std::string(options.path == MatmulPath::kGemv ? "gemv" : "gemm") +
                 " m=" + std::to_string(m));
}
BENCHMARK(BM_PathCrossover)
    ->ArgsProduct({{1, 2, 3, 4, 5, 6, 8, 12, 16}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace loom::cpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cpu", loom::cpu::DescribeCpu());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
