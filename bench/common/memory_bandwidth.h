// The memory roofline every bandwidth-bound benchmark is compared with: DRAM read bandwidth
// measured the way a decode step reads weights, as several long sequential streams per thread
// read side by side (one stream per core cannot saturate DRAM on current server parts), over a
// buffer far larger than the caches.
#pragma once

#include <cstdint>
#include <map>

#include "kernels/cpu/thread_pool.h"

namespace loom::bench {

// Sums `bytes` (a multiple of 64 per stream is used) of `data` read as `streams` equal parts
// side by side, 64 bytes per part per step, with AVX2 loads. `streams` in 1..16.
uint64_t ReadStreams(const uint8_t* data, int64_t bytes, int streams);

struct BandwidthResult {
  // Best over every stream count and repetition: the roofline.
  double best_gb_per_s = 0;
  int best_streams_per_thread = 0;
  // Best per stream count.
  std::map<int, double> gb_per_s_by_streams;
  int64_t buffer_bytes = 0;
};

// Reads a buffer of `buffer_bytes` with every thread of `pool` (each its own slice) at 1, 2, 4 and
// 8 streams per thread, `repetitions` times each. Needs AVX2; returns zeros without it.
BandwidthResult MeasureReadBandwidth(cpu::ThreadPool& pool, int64_t buffer_bytes, int repetitions);

}  // namespace loom::bench
