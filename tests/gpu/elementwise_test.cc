// Parity of the CUDA embedding, SiLU * up and RoPE kernels with kernels/ref on random inputs of
// odd sizes, padded and misaligned rows (the narrower vector paths) and more rows than the launch
// has blocks; and the launchers' argument checks, which run without a device.
//
// Tolerances (of max(1, max |reference|)):
//   Embedding  exact: bf16/f16 -> f32 is exact.
//   SiluMul    1e-6: expf is within 2 ulp and the division is IEEE; a few ulp in all.
//   Rope       1e-6: the kernel may fuse a product into an FMA, one ulp of the products.
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/kv_write.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/ref/ops_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::AsDType;
using gpu_test::DeviceArray;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

constexpr float kSiluMulTolerance = 1e-6f;
constexpr float kRopeTolerance = 1e-6f;

class CudaElementwiseTest : public gpu_test::GpuTest {};

// `offset` elements shift the table and the output off 16-byte alignment.
void CheckEmbedding(int32_t num_tokens, int32_t dim, DType dtype, int64_t offset,
                    std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "tokens=" << num_tokens << " dim=" << dim
                                  << " dtype=" << DTypeName(dtype) << " offset=" << offset);
  const int32_t vocab = 50;
  const auto table = AsDType(RandomFloats(offset + size_t(vocab) * dim, rng), dtype);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<int32_t> ids(num_tokens);
  for (int32_t& id : ids) id = token(rng);
  ids.front() = vocab - 1;
  ids.back() = 0;
  const size_t out_size = offset + size_t(num_tokens) * dim;
  std::vector<float> want(out_size, -7.0f);
  const uint8_t* table_rows = table.data() + offset * DTypeSize(dtype);
  ref::Embedding(ids.data(), num_tokens, table_rows, dtype, dim, want.data() + offset);

  DeviceArray<uint8_t> d_table(table);
  DeviceArray<int32_t> d_ids(ids);
  DeviceArray<float> d_out(std::vector<float>(out_size, -7.0f));
  ASSERT_EQ(cuda::Embedding(d_ids.get(), num_tokens, d_table.get() + offset * DTypeSize(dtype),
                            dtype, dim, d_out.get() + offset, nullptr),
            cudaSuccess);
  EXPECT_EQ(d_out.ToHost(), want);
}

TEST_F(CudaElementwiseTest, EmbeddingMatchesReference) {
  std::mt19937 rng(3);
  for (int32_t dim : {1, 2, 3, 7, 8, 16, 33, 4096, 8191, 8192}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t offset : {0, 1, 4}) CheckEmbedding(9, dim, dtype, offset, rng);
    }
  }
  CheckEmbedding(70001, 3, DType::kBF16, 0, rng);  // blocks loop over tokens
  CheckEmbedding(70001, 16, DType::kF16, 0, rng);
}

void CheckSiluMul(int32_t rows, int32_t dim, int64_t pad, int64_t offset, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "rows=" << rows << " dim=" << dim << " pad=" << pad
                                  << " offset=" << offset);
  const int64_t stride = dim + pad;
  const size_t size = offset + size_t(rows) * stride;
  const auto gate = RandomFloats(size, rng, 6.0f);
  const auto up = RandomFloats(size, rng, 3.0f);
  const auto out_init = RandomFloats(size, rng);
  std::vector<float> want = out_init;
  ref::SiluMul(gate.data() + offset, stride, up.data() + offset, stride, rows, dim,
               want.data() + offset, stride);
  DeviceArray<float> d_gate(gate), d_up(up), d_out(out_init);
  ASSERT_EQ(cuda::SiluMul(d_gate.get() + offset, stride, d_up.get() + offset, stride, rows, dim,
                          d_out.get() + offset, stride, nullptr),
            cudaSuccess);
  EXPECT_LT(MaxRelDiff(d_out.ToHost(), want), kSiluMulTolerance);
}

TEST_F(CudaElementwiseTest, SiluMulMatchesReference) {
  std::mt19937 rng(5);
  for (int32_t dim : {1, 3, 4, 5, 8, 33, 1000, 8191, 8192}) {
    for (int32_t rows : {1, 9}) {
      CheckSiluMul(rows, dim, 0, 0, rng);
      CheckSiluMul(rows, dim, 4, 4, rng);
      CheckSiluMul(rows, dim, 1, 1, rng);
    }
  }
  CheckSiluMul(70001, 5, 0, 0, rng);
}

struct RopeCase {
  int32_t num_tokens, num_heads, head_dim, rotary_dim;
  int64_t pad, offset;  // x rows: `offset` elements in, `pad` elements between tokens
};

void CheckRope(const RopeCase& c, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "tokens=" << c.num_tokens << " heads=" << c.num_heads
                                  << " head_dim=" << c.head_dim << " rotary_dim=" << c.rotary_dim
                                  << " pad=" << c.pad << " offset=" << c.offset);
  const int64_t stride = int64_t{c.num_heads} * c.head_dim + c.pad;
  const size_t size = c.offset + size_t(c.num_tokens) * stride;
  const int32_t half = c.rotary_dim / 2;
  auto want = RandomFloats(size, rng);
  const auto cos = RandomFloats(size_t(c.num_tokens) * half, rng);
  const auto sin = RandomFloats(size_t(c.num_tokens) * half, rng);
  DeviceArray<float> d_x(want), d_cos(cos), d_sin(sin);
  ref::Rope(want.data() + c.offset, stride, c.num_tokens, c.num_heads, c.head_dim, c.rotary_dim,
            cos.data(), sin.data());
  ASSERT_EQ(cuda::Rope(d_x.get() + c.offset, stride, c.num_tokens, c.num_heads, c.head_dim,
                       c.rotary_dim, d_cos.get(), d_sin.get(), nullptr),
            cudaSuccess);
  EXPECT_LT(MaxRelDiff(d_x.ToHost(), want), kRopeTolerance);
}

TEST_F(CudaElementwiseTest, RopeMatchesReference) {
  std::mt19937 rng(7);
  for (int32_t heads : {1, 3, 8, 32}) {
    for (int32_t head_dim : {2, 6, 8, 64, 128}) {
      for (int32_t rotary_dim : {head_dim, head_dim / 2}) {
        for (int32_t tokens : {1, 5}) {
          CheckRope({tokens, heads, head_dim, rotary_dim, 0, 0}, rng);
          CheckRope({tokens, heads, head_dim, rotary_dim, 4, 4}, rng);
          CheckRope({tokens, heads, head_dim, rotary_dim, 5, 1}, rng);
        }
      }
    }
  }
  CheckRope({3, 4, 7, 6, 0, 0}, rng);      // odd head_dim, last dimension left alone
  CheckRope({70001, 2, 8, 8, 0, 0}, rng);  // blocks loop over tokens
}

// Argument checks come before any CUDA call, so this runs with or without a device.
TEST(CudaLaunchArguments, RejectsBadSizesAndDtypes) {
  float* x = nullptr;
  EXPECT_EQ(cuda::Embedding(nullptr, -1, nullptr, DType::kF32, 8, x, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Embedding(nullptr, 0, nullptr, DType::kI32, 8, x, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Embedding(nullptr, 0, nullptr, DType::kBF16, 8, x, nullptr), cudaSuccess);
  EXPECT_EQ(cuda::RmsNorm(x, 8, 4, -8, nullptr, DType::kF32, 1e-5f, x, 8, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::RmsNorm(x, 8, 4, 8, nullptr, DType::kI8, 1e-5f, x, 8, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::RmsNorm(x, 8, 0, 8, nullptr, DType::kF16, 1e-5f, x, 8, nullptr), cudaSuccess);
  EXPECT_EQ(cuda::AddRmsNorm(x, x, -1, 8, nullptr, DType::kF32, 1e-5f, x, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::SiluMul(x, 8, x, 8, -2, 8, x, 8, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::SiluMul(x, 8, x, 8, 2, 0, x, 8, nullptr), cudaSuccess);
  EXPECT_EQ(cuda::Rope(x, 8, 1, 1, 8, 10, x, x, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Rope(x, 8, 1, 1, 8, 1, x, x, nullptr), cudaSuccess);  // half = 0
  KvWriteArgs kv;
  kv.num_tokens = 3;
  kv.cache.num_kv_heads = 1;
  kv.cache.head_dim = 8;
  kv.cache.block_size = 0;
  EXPECT_EQ(cuda::WriteKv(kv, nullptr), cudaErrorInvalidValue);
  kv.cache.block_size = 16;
  kv.cache.dtype = DType::kI16;
  EXPECT_EQ(cuda::WriteKv(kv, nullptr), cudaErrorInvalidValue);
  kv.cache.dtype = DType::kF16;
  kv.num_tokens = 0;
  EXPECT_EQ(cuda::WriteKv(kv, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace loom
