// Device memory for the CUDA kernel benchmarks: a buffer filled with the byte 0x3c and uploads
// from host vectors, both finished before they return. 0x3c... reads as finite, normal values in
// every type the benchmarks use (f32 and bf16 ~0.0115, f16 ~1.06, fp8 E4M3 1.5, int8 quants 60),
// so no NaN or denormal slows a kernel down. The benchmarks launch on a
// non-blocking stream, which does not wait for the legacy stream's memset and copies, and a copy
// from pageable memory may still be in flight when cudaMemcpy returns (a kernel once read a
// half-written block table and faulted).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <vector>

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

}  // namespace loom::bench
