// CUDA device discovery and measurement for tests, benchmarks and start-up checks.
//
// Plain C++: includes only the CUDA runtime API header. Nothing here aborts when the machine has
// no driver or no device (CudaDeviceAvailable() is false then), except LOOM_CUDA_CHECK, which is
// meant for tests and benchmarks that have already checked for a device. Every function may be
// called from any thread; each acts on the calling thread's current device.
#pragma once

#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>

namespace loom::cuda {

// True when the CUDA runtime reports at least one device. Without a driver, with an
// incompatible one or with no device it returns false. (The runtime keeps answering later calls
// with its initialisation error, e.g. cudaErrorInsufficientDriver; that cannot be cleared, so
// callers ask this first and make no other CUDA call when it is false.)
bool CudaDeviceAvailable();

// What a benchmark or a log line says about a device.
struct CudaDeviceInfo {
  int device = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  size_t total_memory_bytes = 0;
  size_t free_memory_bytes = 0;
  size_t l2_cache_bytes = 0;
  int memory_bus_width_bits = 0;
};

// Fills `info` for `device`. Returns the runtime's error (e.g. cudaErrorInvalidDevice).
cudaError_t QueryCudaDevice(int device, CudaDeviceInfo* info);

// Device-to-device copy bandwidth on the current device: allocates two buffers of `bytes`,
// copies one into the other once to warm up, then `repeats` times between two events on a
// stream of its own, and frees them. `*bytes_per_second` counts bytes read plus bytes written
// (2 * bytes per copy), the same accounting the kernel benchmarks use, so a kernel's GB/s
// divided by this is its fraction of what the memory system delivers. Pick `bytes` several
// times the L2 size (a few hundred MiB or more).
cudaError_t MeasureCopyBandwidth(size_t bytes, int repeats, double* bytes_per_second);

// Prints "<file>:<line>: <expr> failed: <error name>: <error text>" to stderr and aborts.
[[noreturn]] void CudaCheckFailed(cudaError_t error, const char* expr, const char* file, int line);

}  // namespace loom::cuda

// Evaluates `expr` (a cudaError_t) once and aborts with a message unless it is cudaSuccess.
// For tests and benchmarks; library code returns the error instead.
#define LOOM_CUDA_CHECK(expr)                                                 \
  do {                                                                        \
    const cudaError_t loom_cuda_check_error = (expr);                         \
    if (loom_cuda_check_error != cudaSuccess) {                               \
      ::loom::cuda::CudaCheckFailed(loom_cuda_check_error, #expr, __FILE__, __LINE__); \
    }                                                                         \
  } while (false)
