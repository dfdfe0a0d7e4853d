// The memory roofline every bandwidth-bound benchmark is compared with: the best DRAM read
// bandwidth this machine gives, found by sweeping how the read is shaped rather than assumed.
//
// A decode step reads weights as several long sequential streams per thread. How many streams
// per thread saturate DRAM, and whether it matters where they start, differs between machines
// and is not monotonic (a VM's pages map onto channels and banks in ways the guest cannot see), so
// the probe tries 1..16 streams per thread under three placements of the streams and reports the
// best as the roofline, with every figure it measured beside it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kernels/cpu/thread_pool.h"

namespace loom::bench {

// Where a thread's streams start inside the buffer.
enum class StreamPlacement {
  // Thread t reads the t-th contiguous slice, cut into `streams` equal consecutive parts.
  kSlices,
  // As kSlices, but stream s starts s * 4160 bytes (a page and a line) later than the equal cut,
  // so streams do not start at the same offset modulo large powers of two.
  kStaggered,
  // The buffer is cut into threads x streams equal parts; thread t's stream s reads part
  // s * threads + t, so the threads' streams sit side by side in address space.
  kInterleaved,
};

std::string_view StreamPlacementName(StreamPlacement placement);

// Sums `bytes` of `data` (each part a multiple of 64 bytes) read as `streams` equal parts side
// by side, 64 bytes per part per step, with the widest loads the CPU has (AVX-512 or AVX2).
// `streams` in 1..16. Needs AVX2.
uint64_t ReadStreams(const uint8_t* data, int64_t bytes, int streams);

struct BandwidthResult {
  // Best over every placement, stream count and repetition: the roofline.
  double best_gb_per_s = 0;
  int best_streams_per_thread = 0;
  std::string best_placement;
  // Best per stream count, over every placement.
  std::map<int, double> gb_per_s_by_streams;
  // Best per placement name and stream count.
  std::map<std::string, std::map<int, double>> gb_per_s_by_placement;
  int64_t buffer_bytes = 0;
  // "avx512" or "avx2": the loads used.
  std::string loads;
};

// Reads a buffer of `buffer_bytes` with every thread of `pool` at 1, 2, 3, 4, 6, 8, 12 and 16
// streams per thread under each placement, `repetitions` times each. Needs AVX2; returns zeros
// without it.
BandwidthResult MeasureReadBandwidth(cpu::ThreadPool& pool, int64_t buffer_bytes, int repetitions);

}  // namespace loom::bench
