#include "bench/engine/memory_bandwidth.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace loom::bench {
namespace {

// Sums `streams` equal slices of [begin, end) in lock step, 64 bytes per stream per iteration.
// The sum goes to a volatile sink so the loads are not removed.
uint64_t ReadStreams(const uint64_t* begin, const uint64_t* end, int streams) {
  const int64_t words = end - begin;
  const int64_t per_stream = words / streams / 8 * 8;
  uint64_t acc[16] = {};
  for (int64_t i = 0; i < per_stream; i += 8) {
    for (int s = 0; s < streams; ++s) {
      const uint64_t* p = begin + s * per_stream + i;
      acc[s & 15] += p[0] ^ p[1] ^ p[2] ^ p[3] ^ p[4] ^ p[5] ^ p[6] ^ p[7];
    }
  }
  uint64_t total = 0;
  for (uint64_t a : acc) total += a;
  return total;
}

}  // namespace

BandwidthResult MeasureReadBandwidth(cpu::ThreadPool& pool, int64_t buffer_bytes,
                                     int streams_per_thread, int repetitions) {
  const int64_t words = buffer_bytes / 8;
  auto* data = static_cast<uint64_t*>(std::aligned_alloc(4096, words * 8));
  // Touch every page from the threads that will read it.
  pool.ParallelFor(words, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) data[i] = static_cast<uint64_t>(i);
  });
  volatile uint64_t sink = 0;
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
