#include "bench/engine/memory_bandwidth.h"

#include "kernels/cpu/cpu_features.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <immintrin.h>

namespace loom::bench {
namespace {

// Sums `streams` equal slices of [begin, end) in lock step, 64 bytes per stream per iteration,
// with 256-bit loads (AVX2 is the baseline loom requires for its fast paths). The sum goes to a
// volatile sink so the loads are not removed.
__attribute__((target("avx2"))) float ReadStreams(const float* begin, const float* end,
                                                   int streams) {
  const int64_t per_stream = (end - begin) / streams / 16 * 16;
  __m256 acc[16];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t i = 0; i < per_stream; i += 16) {
    for (int s = 0; s < streams; ++s) {
      const float* p = begin + s * per_stream + i;
      acc[s & 15] = _mm256_add_ps(acc[s & 15], _mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)));
    }
  }
  float total = 0;
  for (const __m256& a : acc) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, a);
    for (float x : lanes) total += x;
  }
  return total;
}

}  // namespace

BandwidthResult MeasureReadBandwidth(cpu::ThreadPool& pool, int64_t buffer_bytes,
                                     int streams_per_thread, int repetitions) {
  if (cpu::MaxIsa(cpu::DetectCpuFeatures()) < cpu::Isa::kAvx2) return {};  // no AVX2: not measured
  const int64_t words = buffer_bytes / 4;
  auto* data = static_cast<float*>(std::aligned_alloc(4096, words * 4));
  // Touch every page from the threads that will read it.
  pool.ParallelFor(words, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) data[i] = static_cast<float>(i & 1023);
  });
  volatile float sink = 0;
  BandwidthResult result;
  result.buffer_bytes = buffer_bytes;
  result.streams_per_thread = streams_per_thread;
  double total = 0;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pool.ParallelFor(words, [&](int64_t b, int64_t e, int) {
      sink = sink + ReadStreams(data + b, data + e, streams_per_thread);
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double gbps = static_cast<double>(buffer_bytes) / seconds / 1e9;
    result.best_gb_per_s = std::max(result.best_gb_per_s, gbps);
    total += gbps;
  }
  result.mean_gb_per_s = total / repetitions;
  std::free(data);
  return result;
}

}  // namespace loom::bench
