#include "bench/common/memory_bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_features.h"

namespace loom::bench {
namespace {

template <int kStreams>
__attribute__((target("avx2"))) uint64_t ReadStreamsFixed(const uint8_t* data, int64_t bytes) {
  const int64_t part = bytes / kStreams / 64 * 64;
  __m256i acc[kStreams];
  for (int s = 0; s < kStreams; ++s) acc[s] = _mm256_setzero_si256();
  for (int64_t i = 0; i < part; i += 64) {
#pragma GCC unroll 16
    for (int s = 0; s < kStreams; ++s) {
      const auto* p = reinterpret_cast<const __m256i*>(data + s * part + i);
      acc[s] = _mm256_add_epi64(acc[s],
                                _mm256_xor_si256(_mm256_loadu_si256(p), _mm256_loadu_si256(p + 1)));
    }
  }
  uint64_t sum = 0;
  for (int s = 0; s < kStreams; ++s) sum += static_cast<uint64_t>(_mm256_extract_epi64(acc[s], 0));
  return sum;
}

}  // namespace

uint64_t ReadStreams(const uint8_t* data, int64_t bytes, int streams) {
  switch (streams) {
    case 1: return ReadStreamsFixed<1>(data, bytes);
    case 2: return ReadStreamsFixed<2>(data, bytes);
    case 4: return ReadStreamsFixed<4>(data, bytes);
    case 8: return ReadStreamsFixed<8>(data, bytes);
    default: return ReadStreamsFixed<16>(data, bytes);
  }
}

BandwidthResult MeasureReadBandwidth(cpu::ThreadPool& pool, int64_t buffer_bytes, int repetitions) {
  BandwidthResult result;
  if (cpu::MaxIsa(cpu::DetectCpuFeatures()) < cpu::Isa::kAvx2) return result;
  result.buffer_bytes = buffer_bytes;
  auto* data = static_cast<uint8_t*>(std::aligned_alloc(4096, static_cast<size_t>(buffer_bytes)));
  const int threads = pool.num_threads();
  const int64_t slice = buffer_bytes / threads / 4096 * 4096;
  // Touch every page from the thread that will read it.
  pool.ParallelFor(threads, [&](int64_t t, int64_t, int) {
    std::memset(data + t * slice, static_cast<int>(t + 1), static_cast<size_t>(slice));
  });
  volatile uint64_t sink = 0;
  for (int streams : {1, 2, 4, 8}) {
    double best = 0;
    for (int r = 0; r < repetitions; ++r) {
      const auto start = std::chrono::steady_clock::now();
      pool.ParallelFor(threads, [&](int64_t t, int64_t, int) {
        sink = sink + ReadStreams(data + t * slice, slice, streams);
      });
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, static_cast<double>(slice) * threads / seconds / 1e9);
    }
    result.gb_per_s_by_streams[streams] = best;
    if (best > result.best_gb_per_s) {
      result.best_gb_per_s = best;
      result.best_streams_per_thread = streams;
    }
  }
  std::free(data);
  return result;
}

}  // namespace loom::bench
