// Parity of the CUDA Hadamard rotation (kernels/cuda/hadamard.h) with ref::HadamardRotate for
// every power-of-two row length up to 1024, more rows than the launch has blocks, and the
// launcher's argument checks (which run without a device). Tolerance: 2e-5 * sqrt(dim) of the
// reference's scale, the f32 rounding of log2(dim) passes of sums against the reference's f64
// sums.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/hadamard.h"
#include "kernels/ref/ops_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::DeviceArray;
using gpu_test::RandomFloats;

class CudaHadamardTest : public gpu_test::GpuTest {};

TEST_F(CudaHadamardTest, MatchesReference) {
  std::mt19937 rng(29);
  for (int32_t dim : {2, 4, 32, 64, 128, 256, 512, 1024}) {
    for (int64_t rows : {int64_t{1}, int64_t{37}, int64_t{70000}}) {
      if (int64_t{dim} * rows > (int64_t{1} << 24)) continue;
      SCOPED_TRACE(testing::Message() << "dim=" << dim << " rows=" << rows);
      const std::vector<float> x = RandomFloats(size_t(rows) * dim, rng);
      std::vector<float> want = x;
      // The O(dim^2) reference on a sample of rows; all rows on the device.
      const int64_t checked = std::min<int64_t>(rows, 64);
      ref::HadamardRotate(want.data(), checked, dim);
      DeviceArray<float> d_x(x);
      ASSERT_EQ(cuda::HadamardRotate(d_x.get(), rows, dim, nullptr), cudaSuccess);
      const std::vector<float> got = d_x.ToHost();
      const float max_diff = test::MaxAbsDiff(got.data(), want.data(), size_t(checked * dim));
      EXPECT_LE(max_diff, 2e-5f * std::sqrt(float(dim)) * 4);
      // The last row too (the grid loops past its block count for 70000 rows).
      std::vector<float> last(x.end() - dim, x.end());
      ref::HadamardRotate(last.data(), 1, dim);
      for (int32_t i = 0; i < dim; ++i) {
        ASSERT_NEAR(got[size_t(rows - 1) * dim + i], last[i], 2e-5f * std::sqrt(float(dim)) * 4);
      }
    }
  }
}

TEST(CudaHadamardArguments, RejectsBadSizes) {
  EXPECT_EQ(cuda::HadamardRotate(nullptr, -1, 64, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::HadamardRotate(nullptr, 4, 48, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::HadamardRotate(nullptr, 4, 2048, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::HadamardRotate(nullptr, 4, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::HadamardRotate(nullptr, 0, 64, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace loom
