// Parity of the CUDA mixture-of-experts row kernels (kernels/cuda/moe.h) with kernels/ref on
// random inputs: odd widths and misaligned buffers (the narrower vector paths), more rows than a
// launch has blocks, a strided gather source, repeated source rows; the init with and without a
// shared expert, in place; the scatter-add over one expert's distinct tokens, twice into the same
// output as consecutive experts do. The launchers' argument checks run without a device.
//
// Tolerances (of max(1, max |reference|)): the gather is exact; the init 1e-6 (expf within 2 ulp,
// an IEEE division); the scatter-add 1e-6 (a fused multiply-add where ref may round the product).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/moe.h"
#include "kernels/ref/moe_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::DeviceArray;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

constexpr float kTolerance = 1e-6f;

class CudaMoeOpsTest : public gpu_test::GpuTest {};

void CheckGather(int32_t num_rows, int32_t dim, int64_t pad, int64_t offset, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "rows=" << num_rows << " dim=" << dim << " pad=" << pad
                                  << " offset=" << offset);
  const int32_t source_rows = 37;
  const int64_t stride = dim + pad;
  const auto x = RandomFloats(offset + size_t(source_rows) * stride, rng);
  std::uniform_int_distribution<int32_t> pick(0, source_rows - 1);
  std::vector<int32_t> rows(num_rows);
  for (int32_t& r : rows) r = pick(rng);
  rows.front() = source_rows - 1;
  std::vector<float> want(offset + size_t(num_rows) * dim, -3.0f);
  ref::GatherRows(x.data() + offset, stride, rows.data(), num_rows, dim, want.data() + offset);

  DeviceArray<float> d_x(x);
  DeviceArray<int32_t> d_rows(rows);
  DeviceArray<float> d_out(std::vector<float>(want.size(), -3.0f));
  ASSERT_EQ(cuda::GatherRows(d_x.get() + offset, stride, d_rows.get(), num_rows, dim,
                             d_out.get() + offset, nullptr),
            cudaSuccess);
  EXPECT_EQ(d_out.ToHost(), want);
}

TEST_F(CudaMoeOpsTest, GatherRowsMatchesReference) {
  std::mt19937 rng(11);
  for (int32_t dim : {1, 3, 8, 33, 1024, 4097}) {
    for (int64_t pad : {0, 1, 4}) {
      for (int64_t offset : {0, 1}) CheckGather(9, dim, pad, offset, rng);
    }
  }
  CheckGather(70001, 4, 0, 0, rng);  // blocks loop over rows
}

void CheckInit(int32_t num_tokens, int32_t dim, bool shared, int64_t offset, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "tokens=" << num_tokens << " dim=" << dim
                                  << " shared=" << shared << " offset=" << offset);
  const size_t size = offset + size_t(num_tokens) * dim;
  const auto in = RandomFloats(size, rng, 2.0f);
  const auto gates = RandomFloats(num_tokens, rng, 4.0f);
  std::vector<float> want = in;
  ref::MoeInitOutput(shared ? want.data() + offset : nullptr, shared ? gates.data() : nullptr,
                     num_tokens, dim, want.data() + offset);

  DeviceArray<float> d_io(in);  // in place, as the block calls it
  DeviceArray<float> d_gates(gates);
  ASSERT_EQ(cuda::MoeInitOutput(shared ? d_io.get() + offset : nullptr,
                                shared ? d_gates.get() : nullptr, num_tokens, dim,
                                d_io.get() + offset, nullptr),
            cudaSuccess);
  EXPECT_LE(MaxRelDiff(d_io.ToHost(), want), kTolerance);
}

TEST_F(CudaMoeOpsTest, InitOutputMatchesReference) {
  std::mt19937 rng(12);
  for (int32_t dim : {1, 3, 8, 33, 4096}) {
    for (bool shared : {false, true}) {
      for (int64_t offset : {0, 2}) CheckInit(7, dim, shared, offset, rng);
    }
  }
  CheckInit(70001, 8, true, 0, rng);
}

// Two experts' outputs added in turn into the same delta, each to a random set of distinct tokens.
void CheckScatter(int32_t num_tokens, int32_t dim, int64_t offset, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "tokens=" << num_tokens << " dim=" << dim
                                  << " offset=" << offset);
  std::vector<float> want = RandomFloats(offset + size_t(num_tokens) * dim, rng);
  DeviceArray<float> d_out(want);
  for (int expert = 0; expert < 2; ++expert) {
    std::vector<int32_t> tokens(num_tokens);
    std::iota(tokens.begin(), tokens.end(), 0);
    std::shuffle(tokens.begin(), tokens.end(), rng);
    tokens.resize(std::max(1, num_tokens / 2 + expert));
    const int32_t num_rows = static_cast<int32_t>(tokens.size());
    const auto rows = RandomFloats(offset + size_t(num_rows) * dim, rng, 3.0f);
    const auto weights = RandomFloats(num_rows, rng);
    ref::MoeScatterAdd(rows.data() + offset, num_rows, dim, tokens.data(), weights.data(),
                       want.data() + offset);
    DeviceArray<float> d_rows(rows);
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<float> d_weights(weights);
    ASSERT_EQ(cuda::MoeScatterAdd(d_rows.get() + offset, num_rows, dim, d_tokens.get(),
                                  d_weights.get(), d_out.get() + offset, nullptr),
              cudaSuccess);
    // The arrays above are freed at the end of this iteration: finish the kernel first.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  EXPECT_LE(MaxRelDiff(d_out.ToHost(), want), kTolerance);
}

TEST_F(CudaMoeOpsTest, ScatterAddMatchesReference) {
  std::mt19937 rng(13);
  for (int32_t dim : {1, 3, 8, 33, 4096}) {
    for (int64_t offset : {0, 1}) CheckScatter(9, dim, offset, rng);
  }
  CheckScatter(70001, 4, 0, rng);
}

// Argument checks come before any CUDA call, so this runs with or without a device.
TEST(CudaMoeOpsArgsTest, RefusesBadArguments) {
  float* x = nullptr;
  int32_t* ids = nullptr;
  float host = 0.0f;  // a non-null pointer, never dereferenced by a refused call
  EXPECT_EQ(cuda::GatherRows(x, 8, ids, -1, 8, x, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::GatherRows(x, -8, ids, 1, 8, x, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::GatherRows(x, 8, ids, 0, 8, x, nullptr), cudaSuccess);
  EXPECT_EQ(cuda::MoeInitOutput(&host, nullptr, 1, 8, x, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::MoeInitOutput(nullptr, nullptr, 1, -8, x, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::MoeInitOutput(nullptr, nullptr, 0, 8, x, nullptr), cudaSuccess);
  EXPECT_EQ(cuda::MoeScatterAdd(x, -1, 8, ids, x, x, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::MoeScatterAdd(x, 2, 0, ids, x, x, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace loom
