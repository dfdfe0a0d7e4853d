// CPU matmul with block-quantized weights against its rooflines (Google Benchmark).
//
//   BM_Roofline       DRAM read bandwidth (bench/common/memory_bandwidth.h: 1-16 streams per
//                     thread in three placements, best of 5) with 1 and 2 threads; the GEMV figures below are given as
//                     a fraction of it ("roof")
//   BM_QuantGemvSweep m = 1 or 8 over 512 MiB of quantized weights of the 1.1B (TinyLlama) shape,
//                     layer after layer as a decode step runs them (q/k/v and gate/up as groups),
//                     so the caches cannot help; GB/s = quantized weight bytes read / time; the
//                     GEMV path with f32 and with int8 activations (QuantActivations)
//   BM_QuantPathCrossover the same sweep at m = 2..16, GEMV (both activation modes) against the
//                     GEMM, 2 threads: the measurement behind MatmulQuantGemvMaxM
//   BM_QuantGemvHot   one thread, one 256×2048 weight kept in L2: the compute side of the GEMV
//   BM_QuantGemm      m = 512 (prefill) on the gate/up 5632×2048 and down 2048×5632 matrices;
//                     GFLOP/s = 2 m n k / time, with bf16 alongside for comparison
//
// Formats: q8_0, q4_0, q4_1, q4_k, q5_k, q6_k, and "q4_k_m", the mix of a Q4_K_M file (v and down
// in q6_k, the rest q4_k). Weights are random bytes with small f16 scales: the kernels' speed does
// not depend on the values. Counters come from wall time (the pool's threads do the work), so the
// JSON output carries them directly; the instruction set follows LOOM_CPU_ISA.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/common/memory_bandwidth.h"
#include "kernels/common/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace loom::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// A benchmark format: the dtype of the v and down weights may differ from the others (q4_k_m).
struct Format {
  const char* name;
  DType main;
  DType v_down;
};
constexpr Format kFormats[] = {
    {"q8_0", DType::kQ8_0, DType::kQ8_0}, {"q4_0", DType::kQ4_0, DType::kQ4_0},
    {"q4_1", DType::kQ4_1, DType::kQ4_1}, {"q4_k", DType::kQ4_K, DType::kQ4_K},
    {"q5_k", DType::kQ5_K, DType::kQ5_K}, {"q6_k", DType::kQ6_K, DType::kQ6_K},
    {"q4_k_m", DType::kQ4_K, DType::kQ6_K}, {"bf16", DType::kBF16, DType::kBF16}};

ThreadPool& Pool(int num_threads) {
  static ThreadPool* pools[3] = {nullptr, new ThreadPool(1), new ThreadPool(2)};
  return *pools[num_threads];
}

double Seconds(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double>(end - begin).count();
}

void Check(benchmark::State& state, MatmulStatus status) {
  if (status != MatmulStatus::kOk) {
    state.SkipWithError(std::string(MatmulStatusName(status)).c_str());
  }
}

// The measured read roofline per thread count (filled by BM_Roofline, which runs first).
double g_roof_gb_per_s[3] = {};

void BM_Roofline(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  bench::BandwidthResult result;
  for (auto _ : state) result = bench::MeasureReadBandwidth(Pool(threads), int64_t{1} << 30, 5);
  g_roof_gb_per_s[threads] = result.best_gb_per_s;
  state.counters["GB/s"] = result.best_gb_per_s;
  state.SetLabel("threads=" + std::to_string(threads) +
                 " streams=" + std::to_string(result.best_streams_per_thread) +
                 " placement=" + result.best_placement);
}
BENCHMARK(BM_Roofline)->Arg(1)->Arg(2)->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);

// [rows, cols] in `dtype`, 64-byte aligned: random bytes, and every block's f16 fields set to a
// small scale (float weights: small values).
class Matrix {
 public:
  Matrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed)
      : dtype_(dtype), bytes_(static_cast<size_t>(rows * DTypeRowBytes(dtype, cols))) {
    data_ = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes_ + 63) / 64 * 64));
    std::minstd_rand rng(seed);
    for (size_t i = 0; i + 4 <= bytes_; i += 4) {
      const uint32_t r = static_cast<uint32_t>(rng());
      std::memcpy(data_ + i, &r, 4);
    }
    const DTypeTraits t = TraitsOf(dtype);
    const uint16_t small = F32ToFp16(0.01f);
    for (size_t b = 0; b < bytes_ / t.block_bytes; ++b) {
      uint8_t* block = data_ + b * t.block_bytes;
      if (!t.is_quantized) {
        StoreFromF32(data_, dtype, b, 0.01f * static_cast<float>(rng() % 200) - 1.0f);
      } else if (dtype == DType::kQ6_K) {
        std::memcpy(block + 208, &small, 2);
      } else {
        std::memcpy(block, &small, 2);
        if (dtype != DType::kQ8_0 && dtype != DType::kQ4_0) std::memcpy(block + 2, &small, 2);
      }
    }
  }
  ~Matrix() { std::free(data_); }
  Matrix(const Matrix&) = delete;
  Matrix& operator=(const Matrix&) = delete;
  const uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  DType dtype() const { return dtype_; }

 private:
  DType dtype_;
  size_t bytes_;
  uint8_t* data_;
};

// Whole decoder layers of the 1.1B shape in one format, at least 512 MiB of them.
struct ModelWeights {
  static constexpr int64_t kHidden = 2048, kKv = 256, kFfn = 5632;
  const Format* format;
  std::vector<std::unique_ptr<Matrix>> q, k, v, o, gate, up, down;
  size_t bytes = 0;

  explicit ModelWeights(const Format& f) : format(&f) {
    uint32_t seed = 1;
    auto make = [&](DType dtype, int64_t n, int64_t kk) {
      auto m = std::make_unique<Matrix>(dtype, n, kk, seed++);
      bytes += m->bytes();
      return m;
    };
    while (bytes < (size_t{512} << 20)) {
      q.push_back(make(f.main, kHidden, kHidden));
      k.push_back(make(f.main, kKv, kHidden));
      v.push_back(make(f.v_down, kKv, kHidden));
      o.push_back(make(f.main, kHidden, kHidden));
      gate.push_back(make(f.main, kFfn, kHidden));
      up.push_back(make(f.main, kFfn, kHidden));
      down.push_back(make(f.v_down, kHidden, kFfn));
    }
  }
  int num_layers() const { return static_cast<int>(q.size()); }
};

// One model at a time (each is 512 MiB): the one of the last format asked for.
ModelWeights& Model(const Format& format) {
  static std::unique_ptr<ModelWeights> model;
  if (model == nullptr || model->format != &format) {
    model.reset();
    model = std::make_unique<ModelWeights>(format);
  }
  return *model;
}

// One decode step's matmuls over all layers (attention and activations left out).
MatmulStatus RunSweep(const ModelWeights& w, int64_t m, const float* x_hidden, const float* x_ffn,
                      float* y_qkv, float* y_ffn, float* y_out, ThreadPool& pool,
                      const MatmulOptions& options, std::vector<uint8_t>& workspace) {
  constexpr int64_t kH = ModelWeights::kHidden, kKv = ModelWeights::kKv, kF = ModelWeights::kFfn;
  const MatmulInput hidden{x_hidden, m, kH, kH};
  const MatmulInput ffn{x_ffn, m, kF, kF};
  MatmulStatus status = MatmulStatus::kOk;
  void* ws = workspace.data();
  const size_t ws_bytes = workspace.size();
  for (int l = 0; l < w.num_layers() && status == MatmulStatus::kOk; ++l) {
    const MatmulProjection qkv[3] = {
        {w.q[l]->data(), w.q[l]->dtype(), kH, nullptr, y_qkv, kH + 2 * kKv},
        {w.k[l]->data(), w.k[l]->dtype(), kKv, nullptr, y_qkv + kH, kH + 2 * kKv},
        {w.v[l]->data(), w.v[l]->dtype(), kKv, nullptr, y_qkv + kH + kKv, kH + 2 * kKv}};
    const MatmulProjection gate_up[2] = {
        {w.gate[l]->data(), w.gate[l]->dtype(), kF, nullptr, y_ffn, 2 * kF},
        {w.up[l]->data(), w.up[l]->dtype(), kF, nullptr, y_ffn + kF, 2 * kF}};
    const MatmulStatus statuses[4] = {
        MatmulGroup(hidden, qkv, pool, ws, ws_bytes, options),
        Matmul(hidden, {w.o[l]->data(), w.o[l]->dtype(), kH, nullptr, y_out, kH}, pool, ws,
               ws_bytes, options),
        MatmulGroup(hidden, gate_up, pool, ws, ws_bytes, options),
        Matmul(ffn, {w.down[l]->data(), w.down[l]->dtype(), kH, nullptr, y_out, kH}, pool, ws,
               ws_bytes, options)};
    for (MatmulStatus s : statuses) status = s != MatmulStatus::kOk ? s : status;
  }
  return status;
}

std::vector<float> RandomX(int64_t m, int64_t k) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = dist(rng);
  return x;
}

constexpr const char* kModeNames[] = {"f32", "int8"};
constexpr const char* kPathNames[] = {"auto", "gemv", "gemm"};

// The sweep's workspace: enough for x of m rows of the larger k under these options.
std::vector<uint8_t> SweepWorkspace(int64_t m, int threads, const MatmulOptions& options) {
  return std::vector<uint8_t>(MatmulWorkspaceBytes(m, ModelWeights::kFfn, threads, options));
}

// Args: format index, threads, m, activation mode (0 f32, 1 int8). The GEMV path, forced.
void BM_QuantGemvSweep(benchmark::State& state) {
  const Format& format = kFormats[state.range(0)];
  const int threads = static_cast<int>(state.range(1));
  const int64_t m = state.range(2);
  const int mode = static_cast<int>(state.range(3));
  MatmulOptions options;
  options.path = MatmulPath::kGemv;
  options.quant_activations = mode == 1 ? QuantActivations::kInt8 : QuantActivations::kF32;
  std::vector<uint8_t> workspace = SweepWorkspace(m, threads, options);
  const ModelWeights& w = Model(format);
  const std::vector<float> x_hidden = RandomX(m, ModelWeights::kHidden);
  const std::vector<float> x_ffn = RandomX(m, ModelWeights::kFfn);
  std::vector<float> y_qkv(
      static_cast<size_t>(m * (ModelWeights::kHidden + 2 * ModelWeights::kKv)));
  std::vector<float> y_ffn(static_cast<size_t>(m * 2 * ModelWeights::kFfn));
  std::vector<float> y_out(static_cast<size_t>(m * ModelWeights::kHidden));
  const auto begin = Clock::now();
  for (auto _ : state) {
    Check(state, RunSweep(w, m, x_hidden.data(), x_ffn.data(), y_qkv.data(), y_ffn.data(),
                          y_out.data(), Pool(threads), options, workspace));
  }
  const double seconds = Seconds(begin, Clock::now());
  const double gb_per_s = static_cast<double>(w.bytes) * state.iterations() / seconds / 1e9;
  state.counters["GB/s"] = gb_per_s;
  if (g_roof_gb_per_s[threads] > 0) state.counters["roof"] = gb_per_s / g_roof_gb_per_s[threads];
  state.SetLabel(std::string(format.name) + " " + kModeNames[mode] + " " +
                 std::to_string(w.num_layers()) + " layers " + std::to_string(w.bytes >> 20) +
                 " MiB m=" + std::to_string(m) + " threads=" + std::to_string(threads));
}
BENCHMARK(BM_QuantGemvSweep)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7}, {1, 2}, {1, 8}, {0, 1}})
    ->UseRealTime()
    ->MinTime(1.0)
    ->Unit(benchmark::kMillisecond);

// Args: format index, m, path (1 GEMV, 2 GEMM), activation mode (0 f32, 1 int8); 2 threads. The
// same sweep with the path forced: where MatmulQuantGemvMaxM comes from (time per decode step of
// m tokens, and weight GB/s).
void BM_QuantPathCrossover(benchmark::State& state) {
  const Format& format = kFormats[state.range(0)];
  const int64_t m = state.range(1);
  const int path = static_cast<int>(state.range(2));
  const int mode = static_cast<int>(state.range(3));
  const int threads = 2;
  MatmulOptions options;
  options.path = path == 1 ? MatmulPath::kGemv : MatmulPath::kGemm;
  options.quant_activations = mode == 1 ? QuantActivations::kInt8 : QuantActivations::kF32;
  std::vector<uint8_t> workspace = SweepWorkspace(m, threads, options);
  const ModelWeights& w = Model(format);
  const std::vector<float> x_hidden = RandomX(m, ModelWeights::kHidden);
  const std::vector<float> x_ffn = RandomX(m, ModelWeights::kFfn);
  std::vector<float> y_qkv(
      static_cast<size_t>(m * (ModelWeights::kHidden + 2 * ModelWeights::kKv)));
  std::vector<float> y_ffn(static_cast<size_t>(m * 2 * ModelWeights::kFfn));
  std::vector<float> y_out(static_cast<size_t>(m * ModelWeights::kHidden));
  const auto begin = Clock::now();
  for (auto _ : state) {
    Check(state, RunSweep(w, m, x_hidden.data(), x_ffn.data(), y_qkv.data(), y_ffn.data(),
                          y_out.data(), Pool(threads), options, workspace));
  }
  const double seconds = Seconds(begin, Clock::now());
  state.counters["GB/s"] = static_cast<double>(w.bytes) * state.iterations() / seconds / 1e9;
  state.SetLabel(std::string(format.name) + " m=" + std::to_string(m) + " " + kPathNames[path] +
                 " " + kModeNames[mode]);
}
BENCHMARK(BM_QuantPathCrossover)
    ->ArgsProduct({{0, 1, 2, 6}, {2, 4, 8, 16}, {1, 2}, {0, 1}})
    ->UseRealTime()
    ->MinTime(0.5)
    ->Unit(benchmark::kMillisecond);

// Args: format index, m, activation mode (0 f32, 1 int8). One thread, one 256×2048 weight read
// over and over from L2: the decode and dot cost of the GEMV without the memory, as weight
// elements per second.
void BM_QuantGemvHot(benchmark::State& state) {
  const Format& format = kFormats[state.range(0)];
  const int64_t m = state.range(1), n = 256, k = 2048;
  const int mode = static_cast<int>(state.range(2));
  MatmulOptions options;
  options.path = MatmulPath::kGemv;
  options.quant_activations = mode == 1 ? QuantActivations::kInt8 : QuantActivations::kF32;
  std::vector<uint8_t> workspace(MatmulWorkspaceBytes(m, k, 1, options));
  const Matrix weight(format.main, n, k, 5);
  const std::vector<float> x = RandomX(m, k);
  std::vector<float> y(static_cast<size_t>(m * n));
  const auto begin = Clock::now();
  for (auto _ : state) {
    Check(state, Matmul({x.data(), m, k, k}, {weight.data(), format.main, n, nullptr, y.data(), n},
                        Pool(1), workspace.data(), workspace.size(), options));
  }
  const double seconds = Seconds(begin, Clock::now());
  state.counters["Gelem/s"] = static_cast<double>(n * k) * state.iterations() / seconds / 1e9;
  state.counters["GB/s"] = static_cast<double>(weight.bytes()) * state.iterations() / seconds / 1e9;
  state.SetLabel(std::string(format.name) + " m=" + std::to_string(m) + " " + kModeNames[mode]);
}
BENCHMARK(BM_QuantGemvHot)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 7}, {1, 8}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Args: format index, shape (0 gate/up 5632×2048, 1 down 2048×5632), threads, precision (0
// kHighest: the f32 panel GEMM; 1 kBf16: on AVX512-BF16 machines the vdpbf16ps tiles with the
// weights dequantized and rounded to bf16 as they are packed). m = 512.
void BM_QuantGemm(benchmark::State& state) {
  const Format& format = kFormats[state.range(0)];
  const int64_t n = state.range(1) == 0 ? 5632 : 2048;
  const int64_t k = state.range(1) == 0 ? 2048 : 5632;
  const int threads = static_cast<int>(state.range(2));
  const bool bf16 = state.range(3) == 1;
  const int64_t m = 512;
  const MatmulOptions options{.precision = bf16 ? MatmulPrecision::kBf16
                                                : MatmulPrecision::kHighest,
                              .path = MatmulPath::kGemm, .isa = std::nullopt};
  const Matrix weight(format.main, n, k, 7);
  const std::vector<float> x = RandomX(m, k);
  std::vector<float> y(static_cast<size_t>(m * n));
  std::vector<uint8_t> workspace(MatmulWorkspaceBytes(m, k, threads, options));
  const auto begin = Clock::now();
  for (auto _ : state) {
    Check(state, Matmul({x.data(), m, k, k}, {weight.data(), format.main, n, nullptr, y.data(), n},
                        Pool(threads), workspace.data(), workspace.size(), options));
  }
  const double seconds = Seconds(begin, Clock::now());
  state.counters["GFLOP/s"] =
      2.0 * static_cast<double>(m * n * k) * state.iterations() / seconds / 1e9;
  state.SetLabel(std::string(format.name) + (state.range(1) == 0 ? " gate_up" : " down") +
                 " m=512 threads=" + std::to_string(threads) + (bf16 ? " bf16" : " highest"));
}
BENCHMARK(BM_QuantGemm)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 7}, {0, 1}, {1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace loom::cpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cpu", loom::cpu::DescribeCpu());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
