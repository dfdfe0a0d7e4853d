// Parity of the CUDA RMSNorm and residual-add + RMSNorm kernels with kernels/ref, on random
// inputs: row lengths from 1 to 8192 (odd ones, and non-multiples of the vector width), padded
// and misaligned rows that force the narrower vector paths, more rows than the launch has blocks.
//
// Tolerance: 1e-5 of max(1, max |reference|). The kernels sum squares in a different order
// (a tree) and use rsqrtf (within 2 ulp); both move the result by a few f32 ulp. The residual of
// AddRmsNorm is one f32 add per element and must match bit for bit.
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/rms_norm.h"
#include "kernels/ref/ops_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::AsDType;
using gpu_test::DeviceArray;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

constexpr float kNormTolerance = 1e-5f;

// Where rows start in their buffer: `offset` elements in, `pad` elements between rows.
struct RowLayout {
  int64_t offset;
  int64_t pad;
};
// Contiguous and 16-byte aligned; padded but still aligned for 4-wide vectors; odd padding and
// a 4-byte misalignment (scalar path).
constexpr RowLayout kLayouts[] = {{0, 0}, {4, 4}, {1, 3}};

constexpr int32_t kDims[] = {1, 2, 3, 5, 8, 31, 33, 127, 1000, 4096, 4099, 8191, 8192};
constexpr int32_t kRows[] = {1, 7, 33};
constexpr DType kWeightTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// Runs cuda::RmsNorm and ref::RmsNorm on the same strided input, out of place and in place.
void CheckRmsNorm(int32_t rows, int32_t dim, DType wdtype, RowLayout layout, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "rows=" << rows << " dim=" << dim << " weight="
                                  << DTypeName(wdtype) << " offset=" << layout.offset
                                  << " pad=" << layout.pad);
  const int64_t stride = dim + layout.pad;
  const size_t size = layout.offset + static_cast<size_t>(rows) * stride;
  const auto x = RandomFloats(size, rng);
  const auto out_init = RandomFloats(size, rng);  // gaps between rows must keep these
  const auto w = AsDType(RandomFloats(dim, rng), wdtype);
  const float eps = 1e-5f;

  std::vector<float> want = out_init;
  ref::RmsNorm(x.data() + layout.offset, stride, rows, dim, w.data(), wdtype, eps,
               want.data() + layout.offset, stride);
  DeviceArray<float> d_x(x), d_out(out_init);
  DeviceArray<uint8_t> d_w(w);
  ASSERT_EQ(cuda::RmsNorm(d_x.get() + layout.offset, stride, rows, dim, d_w.get(), wdtype, eps,
                          d_out.get() + layout.offset, stride, nullptr),
            cudaSuccess);
  EXPECT_LT(MaxRelDiff(d_out.ToHost(), want), kNormTolerance) << "out of place";

  std::vector<float> want_inplace = x;
  ref::RmsNorm(want_inplace.data() + layout.offset, stride, rows, dim, w.data(), wdtype, eps,
               want_inplace.data() + layout.offset, stride);
  ASSERT_EQ(cuda::RmsNorm(d_x.get() + layout.offset, stride, rows, dim, d_w.get(), wdtype, eps,
                          d_x.get() + layout.offset, stride, nullptr),
            cudaSuccess);
  EXPECT_LT(MaxRelDiff(d_x.ToHost(), want_inplace), kNormTolerance) << "in place";
}

// Runs cuda::AddRmsNorm and ref::AddRmsNorm; `offset` misaligns every buffer by that many floats.
void CheckAddRmsNorm(int32_t rows, int32_t dim, DType wdtype, int64_t offset, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "rows=" << rows << " dim=" << dim << " weight="
                                  << DTypeName(wdtype) << " offset=" << offset);
  const size_t size = offset + static_cast<size_t>(rows) * dim;
  const auto residual = RandomFloats(size, rng);
  const auto delta = RandomFloats(size, rng, 0.5f);
  const auto w = AsDType(RandomFloats(dim, rng), wdtype);
  const float eps = 1e-6f;

  std::vector<float> want_residual = residual, want(size, 0.0f);
  ref::AddRmsNorm(want_residual.data() + offset, delta.data() + offset, rows, dim, w.data(),
                  wdtype, eps, want.data() + offset);
  DeviceArray<float> d_residual(residual), d_delta(delta), d_out(std::vector<float>(size, 0.0f));
  DeviceArray<uint8_t> d_w(w);
  ASSERT_EQ(cuda::AddRmsNorm(d_residual.get() + offset, d_delta.get() + offset, rows, dim,
                             d_w.get(), wdtype, eps, d_out.get() + offset, nullptr),
            cudaSuccess);
  EXPECT_EQ(d_residual.ToHost(), want_residual) << "residual";
  EXPECT_LT(MaxRelDiff(d_out.ToHost(), want), kNormTolerance) << "out";
}

class CudaRmsNormTest : public gpu_test::GpuTest {};

TEST_F(CudaRmsNormTest, MatchesReference) {
  std::mt19937 rng(17);
  for (int32_t dim : kDims) {
    for (int32_t rows : kRows) {
      for (DType wdtype : kWeightTypes) {
        for (const RowLayout& layout : kLayouts) CheckRmsNorm(rows, dim, wdtype, layout, rng);
      }
    }
  }
}

TEST_F(CudaRmsNormTest, AddRmsNormMatchesReference) {
  std::mt19937 rng(29);
  for (int32_t dim : kDims) {
    for (int32_t rows : kRows) {
      for (DType wdtype : kWeightTypes) {
        for (int64_t offset : {0, 1}) CheckAddRmsNorm(rows, dim, wdtype, offset, rng);
      }
    }
  }
}

// More rows than the launch has blocks (65536): blocks loop over rows.
TEST_F(CudaRmsNormTest, ManyRows) {
  std::mt19937 rng(31);
  for (int32_t dim : {3, 64}) {
    CheckRmsNorm(70001, dim, DType::kBF16, {0, 0}, rng);
    CheckAddRmsNorm(70001, dim, DType::kF32, 0, rng);
  }
}

// Rows longer than the registers of a full block hold (1024 threads x 4 vectors of 4) take the
// re-read path for their tail.
TEST_F(CudaRmsNormTest, RowsLongerThanRegisterCache) {
  std::mt19937 rng(37);
  for (int32_t dim : {16384 + 4, 20000, 16385}) {
    CheckRmsNorm(3, dim, DType::kF16, {0, 0}, rng);
    CheckAddRmsNorm(3, dim, DType::kBF16, 0, rng);
  }
}

}  // namespace
}  // namespace loom
