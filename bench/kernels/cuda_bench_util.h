// What the CUDA kernel benchmarks share: the device they run on, the timing of batches of
// launches between CUDA events, and the programs' main.
//
// Device memory: a buffer filled with the byte 0x3c and uploads from host vectors, both finished
// before they return. 0x3c... reads as finite, normal values in every type the benchmarks use
// (f32 and bf16 ~0.0115, f16 ~1.06, fp8 E4M3 1.5, int8 quants 60), so no NaN or denormal slows a
// kernel down. The benchmarks launch on a non-blocking stream, which does not wait for the legacy
// stream's memset and copies, and a copy from pageable memory may still be in flight when
// cudaMemcpy returns (a kernel once read a half-written block table and faulted).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cuda/device.h"

namespace loom::bench {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    const size_t size = std::max<size_t>(bytes, 1);
    LOOM_CUDA_CHECK(cudaMalloc(&data_, size));
    LOOM_CUDA_CHECK(cudaMemset(data_, 0x3c, size));
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(data_); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

template <typename T>
void Upload(const std::vector<T>& host, const DeviceBuffer& device) {
  LOOM_CUDA_CHECK(cudaMemcpy(device.as<T>(), host.data(), host.size() * sizeof(T),
                             cudaMemcpyHostToDevice));
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
}

// The device as every benchmark sees it: the stream it launches on, the device-to-device copy
// bandwidth measured at start-up (bytes read + written per second), its SMs and L2 size.
struct CudaBench {
  cudaStream_t stream = nullptr;
  double copy_bytes_per_second = 0.0;
  int sm_count = 0;
  size_t l2_bytes = 0;
};

inline constexpr int kLaunchesPerIteration = 10;

// Times launch(i) (which queues work on `stream` for launch number i and returns the launch
// error): `warmups` launches (i = 0 ... warmups - 1) first, then batches of
// kLaunchesPerIteration between two CUDA events per benchmark iteration, i counting on. Sets each
// iteration's manual time (seconds per launch) and returns their sum.
inline double TimeLaunches(benchmark::State& state, cudaStream_t stream, int warmups,
                           const std::function<cudaError_t(int)>& launch) {
  cudaEvent_t start, stop;
  LOOM_CUDA_CHECK(cudaEventCreate(&start));
  LOOM_CUDA_CHECK(cudaEventCreate(&stop));
  int next = 0;
  for (; next < warmups; ++next) LOOM_CUDA_CHECK(launch(next));
  double total_seconds = 0.0;
  for (auto _ : state) {
    LOOM_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kLaunchesPerIteration; ++i) LOOM_CUDA_CHECK(launch(next++));
    LOOM_CUDA_CHECK(cudaEventRecord(stop, stream));
    LOOM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    const double seconds = ms * 1e-3 / kLaunchesPerIteration;
    state.SetIterationTime(seconds);
    total_seconds += seconds;
  }
  LOOM_CUDA_CHECK(cudaEventDestroy(start));
  LOOM_CUDA_CHECK(cudaEventDestroy(stop));
  return total_seconds;
}

// The bandwidth counters for `bytes` moved per launch over TimeLaunches' `total_seconds`:
//   GBps           bytes moved / kernel time, in 1e9 bytes per second
//   copy_fraction  GBps over the copy bandwidth measured at start-up
//   MiB_per_launch bytes moved per launch
inline void SetBandwidthCounters(benchmark::State& state, const CudaBench& device, double bytes,
                                 double total_seconds) {
  const double bytes_per_second = bytes * state.iterations() / total_seconds;
  state.counters["GBps"] = bytes_per_second / 1e9;
  state.counters["copy_fraction"] = bytes_per_second / device.copy_bytes_per_second;
  state.counters["MiB_per_launch"] = bytes / (1 << 20);
}

// TimeLaunches over `copies` inputs used in turn (launch(copy) queues the work on copy number
// `copy`; each copy is launched once to warm up), then the bandwidth counters for `bytes` moved
// per launch. Returns the mean seconds per launch.
inline double TimeCopies(benchmark::State& state, const CudaBench& device, double bytes,
                         int copies, const std::function<cudaError_t(int)>& launch) {
  const double total_seconds = TimeLaunches(state, device.stream, copies,
                                            [&](int i) { return launch(i % copies); });
  SetBandwidthCounters(state, device, bytes, total_seconds);
  return total_seconds / std::max<double>(1.0, static_cast<double>(state.iterations()));
}

// A benchmark program's main: without a CUDA device it prints a line and returns 0 with no
// benchmarks; otherwise it measures the copy bandwidth, creates a non-blocking stream, records the
// device in the output's context, calls register_all (which registers the benchmarks; what they
// capture must outlive this call) and runs them.
inline int RunCudaBenchmarks(int argc, char** argv, const char* program,
                             const std::function<void(const CudaBench&)>& register_all) {
  benchmark::Initialize(&argc, argv);
  if (!cuda::CudaDeviceAvailable()) {
    std::printf("%s: no CUDA device; nothing to measure\n", program);
    return 0;
  }
  cuda::CudaDeviceInfo info;
  LOOM_CUDA_CHECK(cuda::QueryCudaDevice(0, &info));
  CudaBench device;
  device.sm_count = info.sm_count;
  device.l2_bytes = info.l2_cache_bytes;
  LOOM_CUDA_CHECK(cuda::MeasureCopyBandwidth(size_t{1} << 30, 20, &device.copy_bytes_per_second));
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&device.stream, cudaStreamNonBlocking));
  benchmark::AddCustomContext("device", info.name);
  benchmark::AddCustomContext("sm_count", std::to_string(info.sm_count));
  benchmark::AddCustomContext("copy_GBps", std::to_string(device.copy_bytes_per_second / 1e9));
  register_all(device);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  LOOM_CUDA_CHECK(cudaStreamDestroy(device.stream));
  return 0;
}

}  // namespace loom::bench
