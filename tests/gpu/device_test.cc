// The CUDA device helpers: discovery never aborts (and runs on any machine); with a device, the
// query and the copy-bandwidth measurement report plausible numbers.
#include <cstddef>

#include <gtest/gtest.h>

#include "kernels/cuda/device.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

// Without a driver this is the one CUDA call the tests make: it must return, not abort.
TEST(CudaDevice, AvailabilityCheckReturnsTheSameAnswerTwice) {
  const bool available = cuda::CudaDeviceAvailable();
  EXPECT_EQ(cuda::CudaDeviceAvailable(), available);
  if (available) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

TEST(CudaDevice, BandwidthRejectsBadArguments) {
  double bytes_per_second = 0.0;
  EXPECT_EQ(cuda::MeasureCopyBandwidth(0, 3, &bytes_per_second), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::MeasureCopyBandwidth(1 << 20, 0, &bytes_per_second), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::MeasureCopyBandwidth(1 << 20, 3, nullptr), cudaErrorInvalidValue);
}

class CudaDeviceTest : public gpu_test::GpuTest {};

TEST_F(CudaDeviceTest, QueryDescribesTheDevice) {
  cuda::CudaDeviceInfo info;
  ASSERT_EQ(cuda::QueryCudaDevice(0, &info), cudaSuccess);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.compute_major, 5);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.total_memory_bytes, size_t{1} << 30);
  EXPECT_LE(info.free_memory_bytes, info.total_memory_bytes);
  EXPECT_GT(info.l2_cache_bytes, 0u);
  EXPECT_NE(cuda::QueryCudaDevice(1 << 20, &info), cudaSuccess);
  cudaGetLastError();
}

TEST_F(CudaDeviceTest, CopyBandwidthIsPlausible) {
  double bytes_per_second = 0.0;
  ASSERT_EQ(cuda::MeasureCopyBandwidth(size_t{256} << 20, 5, &bytes_per_second), cudaSuccess);
  // Any CUDA GPU of the last decade copies faster than 50 GB/s and slower than 100 TB/s.
  EXPECT_GT(bytes_per_second, 50e9);
  EXPECT_LT(bytes_per_second, 100e12);
}

}  // namespace
}  // namespace loom
