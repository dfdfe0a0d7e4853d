#include "bench/common/memory_bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.h"

namespace loom::bench {
namespace {

constexpr int kMaxStreams = 16;
constexpr int64_t kStagger = 4096 + 64;
constexpr int kStreamCounts[] = {1, 2, 3, 4, 6, 8, 12, 16};
constexpr StreamPlacement kPlacements[] = {StreamPlacement::kSlices, StreamPlacement::kStaggered,
                                           StreamPlacement::kInterleaved};

// Reads `part` bytes from each of kStreams starts, 64 bytes of each per step. Four accumulators
// whatever the stream count, so 16 streams do not spill registers.
template <int kStreams>
__attribute__((target("avx2"))) uint64_t ReadPartsAvx2(const uint8_t* const* starts,
                                                       int64_t part) {
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
  const uint8_t* p[kStreams];
  for (int s = 0; s < kStreams; ++s) p[s] = starts[s];
  for (int64_t i = 0; i < part; i += 64) {
#pragma GCC unroll 16
    for (int s = 0; s < kStreams; ++s) {
      const auto* q = reinterpret_cast<const __m256i*>(p[s] + i);
      acc[s & 3] = _mm256_add_epi64(
          acc[s & 3], _mm256_xor_si256(_mm256_loadu_si256(q), _mm256_loadu_si256(q + 1)));
    }
  }
  const __m256i sum = _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]),
                                       _mm256_add_epi64(acc[2], acc[3]));
  return static_cast<uint64_t>(_mm256_extract_epi64(sum, 0));
}

template <int kStreams>
__attribute__((target("avx512f"))) uint64_t ReadPartsAvx512(const uint8_t* const* starts,
                                                           int64_t part) {
  __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
  const uint8_t* p[kStreams];
  for (int s = 0; s < kStreams; ++s) p[s] = starts[s];
  for (int64_t i = 0; i < part; i += 64) {
#pragma GCC unroll 16
    for (int s = 0; s < kStreams; ++s) {
      acc[s & 3] = _mm512_add_epi64(acc[s & 3], _mm512_loadu_si512(p[s] + i));
    }
  }
  const __m512i sum =
      _mm512_add_epi64(_mm512_add_epi64(acc[0], acc[1]), _mm512_add_epi64(acc[2], acc[3]));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, sum);
  return lanes[0];
}

using ReadPartsFn = uint64_t (*)(const uint8_t* const*, int64_t);

template <int... kIs>
std::array<ReadPartsFn, sizeof...(kIs)> Table(bool avx512,
                                                        std::integer_sequence<int, kIs...>) {
  return {(avx512 ? &ReadPartsAvx512<kIs + 1> : &ReadPartsAvx2<kIs + 1>)...};
}

bool HasAvx512() {
  const cpu::CpuFeatures f = cpu::DetectCpuFeatures();
  return f.avx512f;
}

uint64_t ReadParts(const uint8_t* const* starts, int streams, int64_t part) {
  static const auto kTable = Table(HasAvx512(), std::make_integer_sequence<int, kMaxStreams>());
  return kTable[std::clamp(streams, 1, kMaxStreams) - 1](starts, part);
}

// Fills `starts` for thread `t` of `threads` under `placement`; returns the bytes per stream.
int64_t PlaceStreams(const uint8_t* data, int64_t buffer_bytes, int threads, int t, int streams,
                     StreamPlacement placement, const uint8_t** starts) {
  switch (placement) {
    case StreamPlacement::kSlices:
    case StreamPlacement::kStaggered: {
      const int64_t slice = buffer_bytes / threads / 4096 * 4096;
      const int64_t stagger = placement == StreamPlacement::kStaggered ? kStagger : 0;
      const int64_t part = (slice - stagger * (streams - 1)) / streams / 64 * 64;
      for (int s = 0; s < streams; ++s) starts[s] = data + t * slice + s * (part + stagger);
      return part;
    }
    case StreamPlacement::kInterleaved: {
      const int64_t part = buffer_bytes / (int64_t{threads} * streams) / 64 * 64;
      for (int s = 0; s < streams; ++s) starts[s] = data + (int64_t{s} * threads + t) * part;
      return part;
    }
  }
  return 0;
}

}  // namespace

std::string_view StreamPlacementName(StreamPlacement placement) {
  switch (placement) {
    case StreamPlacement::kSlices: return "slices";
    case StreamPlacement::kStaggered: return "staggered";
    case StreamPlacement::kInterleaved: return "interleaved";
  }
  return "?";
}

uint64_t ReadStreams(const uint8_t* data, int64_t bytes, int streams) {
  streams = std::clamp(streams, 1, kMaxStreams);
  const uint8_t* starts[kMaxStreams];
  const int64_t part = PlaceStreams(data, bytes, 1, 0, streams, StreamPlacement::kSlices, starts);
  return ReadParts(starts, streams, part);
}

BandwidthResult MeasureReadBandwidth(cpu::ThreadPool& pool, int64_t buffer_bytes, int repetitions) {
  BandwidthResult result;
  if (cpu::MaxIsa(cpu::DetectCpuFeatures()) < cpu::Isa::kAvx2) return result;
  result.buffer_bytes = buffer_bytes;
  result.loads = HasAvx512() ? "avx512" : "avx2";
  auto* data = static_cast<uint8_t*>(std::aligned_alloc(4096, static_cast<size_t>(buffer_bytes)));
  const int threads = pool.num_threads();
  const int64_t slice = buffer_bytes / threads / 4096 * 4096;
  // Touch every page from the thread that reads it under the slice placements.
  pool.ParallelFor(threads, [&](int64_t t, int64_t, int) {
    std::memset(data + t * slice, static_cast<int>(t + 1), static_cast<size_t>(slice));
  });
  std::vector<uint64_t> sinks(static_cast<size_t>(threads) * 8);
  for (StreamPlacement placement : kPlacements) {
    const std::string name(StreamPlacementName(placement));
    for (int streams : kStreamCounts) {
      double best = 0;
      for (int r = 0; r < repetitions; ++r) {
        int64_t bytes_read = 0;
        const auto start = std::chrono::steady_clock::now();
        pool.ParallelFor(threads, [&](int64_t t, int64_t, int) {
          const uint8_t* starts[kMaxStreams];
          const int64_t part = PlaceStreams(data, buffer_bytes, threads, static_cast<int>(t),
                                            streams, placement, starts);
          sinks[static_cast<size_t>(t) * 8] += ReadParts(starts, streams, part);
          if (t == 0) bytes_read = part * streams * threads;
        });
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        best = std::max(best, static_cast<double>(bytes_read) / seconds / 1e9);
      }
      result.gb_per_s_by_placement[name][streams] = best;
      double& by_streams = result.gb_per_s_by_streams[streams];
      by_streams = std::max(by_streams, best);
      if (best > result.best_gb_per_s) {
        result.best_gb_per_s = best;
        result.best_streams_per_thread = streams;
        result.best_placement = name;
      }
    }
  }
  volatile uint64_t sink = 0;
  for (uint64_t s : sinks) sink = sink + s;
  std::free(data);
  return result;
}

}  // namespace loom::bench
