// Measures the machine's DRAM read bandwidth the way a decode step reads weights: each thread
// reads its share of a large buffer as several interleaved sequential streams (one stream per
// core cannot saturate DRAM on current server parts). The result is the roofline engine decode
// figures are compared with.
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace loom::bench {

struct BandwidthResult {
  double best_gb_per_s = 0;
  double mean_gb_per_s = 0;
  int64_t buffer_bytes = 0;
  int streams_per_thread = 0;
};

BandwidthResult MeasureReadBandwidth(cpu::ThreadPool& pool, int64_t buffer_bytes,
                                     int streams_per_thread, int repetitions);

}  // namespace loom::bench
