// Parity of the dense-weight GEMV (kernels/cuda/dense_gemv.h) with an f32 matmul accumulated in
// double over the same stored weights: f32, bf16 and f16 weights; every row count it takes (1 to
// 8); outputs narrow and wide enough for each of the kernel's features-per-block choices (1, 2
// and 4) with a partial last block; reductions shorter than one pass of the block, several
// passes and a remainder; the vector path and the one-element path (a reduction that is not a
// whole number of vectors, an x that starts one float off 16-byte alignment); strided x and y,
// bias on and off, and y's padding left untouched. The same for the tensor-core variant
// (DenseGemvMma, 16-bit weights) against the reference on x rounded to the weights' type. The
// argument checks run without a device.
//
// Tolerance: 2e-5 of max(1, max |reference|). The kernel sums in f32 in another order; a wrong
// element, row or bias moves outputs by about the size of a product.
#include <cstdint>
#include <string>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/dense_gemv.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::AsDType;
using gpu_test::DeviceArray;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

constexpr float kTolerance = 2e-5f;
constexpr float kSentinel = -7.0f;

struct GemvCase {
  int32_t rows;
  int32_t out;
  int32_t in;
  int64_t x_offset;  // floats before x's first row: 1 puts it off 16-byte alignment
  bool bias;
};

// DenseGemv and DenseGemvMma take the same arguments.
using Launcher = cudaError_t (*)(const float*, int64_t, int32_t, const void*, DType, int32_t,
                                 int32_t, const float*, float*, int64_t, cudaStream_t);

// Runs `launch` on every case and checks it against an f32 matmul in double over the stored
// weights (with x rounded to the weights' type first when `round_x`), and that y's padding is
// untouched.
void ExpectMatchesReference(Launcher launch, DType dtype, const std::vector<GemvCase>& cases,
                            uint32_t seed, bool round_x) {
  std::mt19937 rng(seed);
  for (const GemvCase& c : cases) {
    SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " rows=" << c.rows << " out=" << c.out
                                    << " in=" << c.in << " x_offset=" << c.x_offset
                                    << " bias=" << c.bias);
    const int64_t x_stride = c.in + (c.rows % 2 == 0 ? 8 : 0);
    const int64_t y_stride = c.out + 3;
    const std::vector<float> x =
        RandomFloats(size_t(c.x_offset + int64_t{c.rows} * x_stride), rng);
    const std::vector<uint8_t> w_bytes =
        AsDType(RandomFloats(size_t(c.out) * c.in, rng, 0.05f), dtype);
    const std::vector<float> bias = RandomFloats(size_t(c.out), rng);
    std::vector<float> want(size_t(c.rows) * y_stride, kSentinel);
    for (int32_t r = 0; r < c.rows; ++r) {
      for (int32_t o = 0; o < c.out; ++o) {
        double sum = c.bias ? bias[o] : 0.0;
        for (int32_t i = 0; i < c.in; ++i) {
          float xi = x[c.x_offset + r * x_stride + i];
          if (round_x) {
            uint8_t rounded[4];
            StoreFromF32(rounded, dtype, 0, xi);
            xi = LoadAsF32(rounded, dtype, 0);
          }
          sum += double(xi) * double(LoadAsF32(w_bytes.data(), dtype, int64_t{o} * c.in + i));
        }
        want[r * y_stride + o] = static_cast<float>(sum);
      }
    }
    DeviceArray<uint8_t> d_w(w_bytes);
    DeviceArray<float> d_x(x), d_bias(bias), d_y(std::vector<float>(want.size(), kSentinel));
    ASSERT_EQ(launch(d_x.get() + c.x_offset, x_stride, c.rows, d_w.get(), dtype, c.out, c.in,
                     c.bias ? d_bias.get() : nullptr, d_y.get(), y_stride, nullptr),
              cudaSuccess);
    const std::vector<float> got = d_y.ToHost();
    EXPECT_LT(MaxRelDiff(got, want), kTolerance);
    for (int32_t r = 0; r < c.rows; ++r) {
      for (int64_t col = c.out; col < y_stride; ++col) {
        ASSERT_EQ(got[r * y_stride + col], kSentinel) << "row " << r << " column " << col;
      }
    }
  }
}

class DenseGemvTest : public gpu_test::GpuTest,
                      public ::testing::WithParamInterface<DType> {};

TEST_P(DenseGemvTest, MatchesReference) {
  ExpectMatchesReference(&cuda::DenseGemv, GetParam(),
                         {{1, 67, 2048, 0, true},
                          {1, 4099, 4096, 0, false},
                          {1, 1030, 1000, 0, true},
                          {2, 259, 5632, 0, false},
                          {3, 1024, 96, 0, true},
                          {4, 4096, 2048, 0, true},
                          {5, 33, 14336, 0, false},
                          {6, 2047, 520, 1, true},
                          {7, 5000, 1032, 0, false},
                          {8, 4103, 4096, 0, true},
                          {8, 1, 8, 0, false},
                          {1, 300, 1001, 1, false},
                          {2, 4096, 24, 0, true}},
                         17, /*round_x=*/false);
}

// The tensor-core variant: x rounded to the weights' type (the reference rounds it the same way),
// every row count, features in whole and partial 16-tiles, reductions of one chunk (32), fewer
// chunks than warps, several unrolled passes and a remainder, strided x and y, bias on and off.
TEST_P(DenseGemvTest, MmaMatchesReference) {
  if (GetParam() == DType::kF32) GTEST_SKIP() << "the tensor-core variant takes 16-bit weights";
  ExpectMatchesReference(&cuda::DenseGemvMma, GetParam(),
                         {{1, 16, 32, 0, true},
                          {2, 2048, 2048, 0, false},
                          {3, 37, 5632, 0, true},
                          {4, 4099, 4096, 0, false},
                          {5, 256, 96, 0, true},
                          {6, 1000, 1056, 0, false},
                          {7, 5, 14336, 0, true},
                          {8, 4103, 4096, 0, true},
                          {8, 16, 1024, 0, false}},
                         19, /*round_x=*/true);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DenseGemvTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// Refusals need no device: they return before any launch.
TEST(DenseGemvLaunch, RejectsBadArguments) {
  float* p = nullptr;
  EXPECT_EQ(cuda::DenseGemv(p, 8, 1, p, DType::kQ8_0, 4, 8, nullptr, p, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemv(p, 8, cuda::kDenseGemvMaxRows + 1, p, DType::kBF16, 4, 8, nullptr, p,
                            4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemv(p, 7, 2, p, DType::kBF16, 4, 8, nullptr, p, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemv(p, 8, 2, p, DType::kBF16, 4, 8, nullptr, p, 3, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemv(p, 8, 1, p, DType::kF16, -1, 8, nullptr, p, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemv(p, 8, -1, p, DType::kF32, 4, 8, nullptr, p, 4, nullptr),
            cudaErrorInvalidValue);
  // The tensor-core variant: 16-bit weights, whole 32-element chunks, aligned operands.
  auto* aligned = reinterpret_cast<float*>(uintptr_t{256});
  EXPECT_EQ(cuda::DenseGemvMma(aligned, 64, 2, aligned, DType::kF32, 4, 64, nullptr, aligned, 4,
                               nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemvMma(aligned, 48, 2, aligned, DType::kBF16, 4, 48, nullptr, aligned, 4,
                               nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemvMma(aligned + 1, 64, 2, aligned, DType::kBF16, 4, 64, nullptr,
                               aligned, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemvMma(aligned, 66, 2, aligned, DType::kF16, 4, 64, nullptr, aligned, 4,
                               nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemvMma(aligned, 64, 9, aligned, DType::kF16, 4, 64, nullptr, aligned, 4,
                               nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemvMma(aligned, 64, 0, aligned, DType::kF16, 4, 64, nullptr, aligned, 4,
                               nullptr),
            cudaSuccess);
  // Nothing to compute: no launch, so null pointers are never touched.
  EXPECT_EQ(cuda::DenseGemv(p, 8, 0, p, DType::kF32, 4, 8, nullptr, p, 4, nullptr), cudaSuccess);
  EXPECT_EQ(cuda::DenseGemv(p, 8, 3, p, DType::kF32, 0, 8, nullptr, p, 0, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace loom
