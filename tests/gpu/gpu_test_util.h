// Helpers of the CUDA parity tests (tests/gpu): a fixture that skips without a device, device
// arrays filled from and read back to host vectors, random inputs and comparisons.
//
// The tests are plain C++ (no .cu): they reach the kernels through the launchers' headers and the
// CUDA runtime API only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "kernels/common/dtype.h"
#include "kernels/cuda/device.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::gpu_test {

// Every test of a suite built on this fixture is skipped (and passes) on a machine without a
// CUDA device or driver.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

// A device copy of a host vector; aborts (LOOM_CUDA_CHECK) when an allocation or copy fails.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : size_(host.size()) {
    void* data = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&data, std::max<size_t>(size_, 1) * sizeof(T)));
    data_ = static_cast<T*>(data);
    if (size_ > 0) {
      LOOM_CUDA_CHECK(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
      // A copy from pageable memory may still be in flight when cudaMemcpy returns, and a test
      // that launches on a non-blocking stream would not wait for it.
      LOOM_CUDA_CHECK(cudaDeviceSynchronize());
    }
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(data_); }

  T* get() { return data_; }

  // Waits for the device, then copies the array back.
  std::vector<T> ToHost() const {
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(size_);
    if (size_ > 0) {
      LOOM_CUDA_CHECK(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t size_;
};

inline std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// f32 values stored as `dtype` bytes (bf16/f16 rounded), so reference and kernel read identical
// weights.
inline std::vector<uint8_t> AsDType(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> out(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) StoreFromF32(out.data(), dtype, i, values[i]);
  return out;
}

using ::loom::test::MaxRelDiff;

}  // namespace loom::gpu_test
