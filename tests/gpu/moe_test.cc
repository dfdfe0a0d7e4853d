// Parity of the CUDA mixture-of-experts row kernels (kernels/cuda/moe.h) with kernels/ref on
// random inputs: odd widths and misaligned buffers (the narrower vector paths), more rows than a
// launch has blocks, a strided gather source, repeated source rows; the init with and without a
// shared expert, in place; the scatter-add over one expert's distinct tokens, twice into the same
// output as consecutive experts do. The grouped experts' kernels: routing on the device against
// ref::MoeRoute (every expert count, top_k and renormalization the models use, more tokens than a
// block); the combine against the device's scatter-add expert by expert; the grouped GEMVs
// (dense and quantized) against a double-precision matmul per group, with groups of 0, 1, 8 and
// 17 rows. The launchers' argument checks run without a device.
//
// Tolerances (of max(1, max |reference|)): the gather is exact; the init 1e-6 (expf within 2 ulp,
// an IEEE division); the scatter-add 1e-6 (a fused multiply-add where ref may round the product).
// Routing: the chosen experts, the offsets, the grouped tokens and token rows exactly (random
// logits have no ties); the weights 1e-5 (expf, a sum in another order). The combine equals the
// device's scatter-add to the bit (the same fused multiply-adds in the same order). The grouped
// GEMVs 2e-5 (f32 accumulation in another order, as quant_matmul_test's GEMV tolerance).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/dense_gemv.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/ref/moe_ref.h"
#include "kernels/ref/quant_ref.h"
#include "tests/kernels/moe_routing.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::DeviceArray;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

constexpr float kTolerance = 1e-6f;
constexpr float kSentinelValue = -7.0f;

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

using moe_test::HostRouting;
using moe_test::RouteArgs;

HostRouting RouteOnHost(const std::vector<float>& logits, int32_t num_tokens,
                        int32_t num_experts, int32_t top_k, bool renormalize) {
  HostRouting r(num_tokens, num_experts, top_k);
  ref::MoeRoute(RouteArgs(logits.data(), num_tokens, num_experts, top_k, renormalize,
                          r.buffers()));
  return r;
}

TEST_F(CudaMoeOpsTest, RoutingOnTheDeviceMatchesReference) {
  std::mt19937 rng(14);
  for (int32_t num_experts : {8, 60, 128}) {
    for (int32_t top_k : {1, 2, 8}) {
      for (int32_t num_tokens : {1, 7, 16, 300}) {
        for (bool renormalize : {false, true}) {
          SCOPED_TRACE(testing::Message() << "E=" << num_experts << " k=" << top_k << " T="
                                          << num_tokens << " renorm=" << renormalize);
          const auto logits = RandomFloats(size_t(num_tokens) * num_experts, rng, 3.0f);
          const HostRouting want = RouteOnHost(logits, num_tokens, num_experts, top_k, renormalize);
          const size_t pairs = size_t(num_tokens) * top_k;
          DeviceArray<float> d_logits(logits);
          DeviceArray<int32_t> d_ids(std::vector<int32_t>(pairs, -1));
          DeviceArray<float> d_weights(std::vector<float>(pairs, -1.0f));
          DeviceArray<int32_t> d_offsets(std::vector<int32_t>(num_experts + 1, -1));
          DeviceArray<int32_t> d_tokens(std::vector<int32_t>(pairs, -1));
          DeviceArray<float> d_grouped(std::vector<float>(pairs, -1.0f));
          DeviceArray<int32_t> d_rows(std::vector<int32_t>(pairs, -1));
          const moe_test::RouteBuffers on_device = {d_ids.get(),    d_weights.get(),
                                                   d_offsets.get(), d_tokens.get(),
                                                   d_grouped.get(), d_rows.get()};
          ASSERT_EQ(cuda::MoeRoute(RouteArgs(d_logits.get(), num_tokens, num_experts, top_k,
                                             renormalize, on_device),
                                   nullptr),
                    cudaSuccess);
          EXPECT_EQ(d_ids.ToHost(), want.ids);
          EXPECT_EQ(d_offsets.ToHost(), want.offsets);
          EXPECT_EQ(d_tokens.ToHost(), want.tokens);
          EXPECT_EQ(d_rows.ToHost(), want.token_rows);
          EXPECT_LE(MaxRelDiff(d_weights.ToHost(), want.weights), 1e-5f);
          EXPECT_LE(MaxRelDiff(d_grouped.ToHost(), want.grouped), 1e-5f);
        }
      }
    }
  }
}

TEST_F(CudaMoeOpsTest, CombineAddsWhatScatterAddAddsExpertByExpert) {
  std::mt19937 rng(15);
  for (int32_t dim : {3, 33, 4096}) {
    for (int32_t top_k : {1, 2, 8}) {
      const int32_t num_tokens = 37, num_experts = 16;
      SCOPED_TRACE(testing::Message() << "dim=" << dim << " k=" << top_k);
      const HostRouting r = RouteOnHost(RandomFloats(size_t(num_tokens) * num_experts, rng),
                                    num_tokens, num_experts, top_k, true);
      const size_t pairs = size_t(num_tokens) * top_k;
      const auto rows = RandomFloats(pairs * dim, rng, 2.0f);
      const auto start = RandomFloats(size_t(num_tokens) * dim, rng);
      DeviceArray<float> d_rows(rows);
      DeviceArray<int32_t> d_tokens(r.tokens);
      DeviceArray<int32_t> d_token_rows(r.token_rows);
      DeviceArray<float> d_grouped(r.grouped);
      DeviceArray<float> d_want(start);
      DeviceArray<float> d_got(start);
      for (int32_t e = 0; e < num_experts; ++e) {
        const int32_t first = r.offsets[e];
        ASSERT_EQ(cuda::MoeScatterAdd(d_rows.get() + int64_t{first} * dim, r.offsets[e + 1] - first,
                                      dim, d_tokens.get() + first, d_grouped.get() + first,
                                      d_want.get(), nullptr),
                  cudaSuccess);
      }
      ASSERT_EQ(cuda::MoeCombine(d_rows.get(), num_tokens, top_k, dim, d_token_rows.get(),
                                 d_grouped.get(), d_got.get(), nullptr),
                cudaSuccess);
      EXPECT_EQ(d_got.ToHost(), d_want.ToHost());
    }
  }
}

// Weights of `dtype` ([out, in], its bytes) and the values they decode to.
struct GroupWeights {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

GroupWeights MakeWeights(DType dtype, int32_t out, int32_t in, std::mt19937& rng) {
  const std::vector<float> raw = RandomFloats(size_t(out) * in, rng);
  GroupWeights w{std::vector<uint8_t>(size_t(DTypeRowBytes(dtype, in)) * out), raw};
  for (int32_t o = 0; o < out; ++o) {
    const float* src = raw.data() + size_t(o) * in;
    uint8_t* dst = w.bytes.data() + size_t(DTypeRowBytes(dtype, in)) * o;
    float* values = w.values.data() + size_t(o) * in;
    if (IsQuantizedDType(dtype)) {
      ref::QuantizeRow(dtype, src, in, dst);
      ref::DequantizeRow(dtype, dst, in, values);
    } else if (dtype == DType::kBF16) {
      for (int32_t i = 0; i < in; ++i) {
        const uint16_t bits = F32ToBf16(src[i]);
        std::memcpy(dst + 2 * i, &bits, 2);
        values[i] = Bf16ToF32(bits);
      }
    } else {
      std::memcpy(dst, src, sizeof(float) * in);
    }
  }
  return w;
}

TEST_F(CudaMoeOpsTest, GroupedGemvMatchesAMatmulPerGroup) {
  std::mt19937 rng(16);
  const std::vector<int32_t> group_rows = {3, 0, 17, 1, 8};
  const int32_t num_groups = static_cast<int32_t>(group_rows.size());
  std::vector<int32_t> offsets = {0};
  for (int32_t n : group_rows) offsets.push_back(offsets.back() + n);
  const int32_t num_rows = offsets.back();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    for (int32_t out : {96, 1030}) {
      const int32_t in = 512;
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " out=" << out);
      const int64_t x_stride = in + 4, y_stride = out + 3;
      const auto x = RandomFloats(size_t(num_rows) * x_stride, rng);
      std::vector<float> want(size_t(num_rows) * y_stride, kSentinelValue);
      std::vector<std::unique_ptr<DeviceArray<uint8_t>>> d_weights;
      std::vector<const void*> pointers;
      for (int32_t g = 0; g < num_groups; ++g) {
        const GroupWeights w = MakeWeights(dtype, out, in, rng);
        d_weights.push_back(std::make_unique<DeviceArray<uint8_t>>(w.bytes));
        pointers.push_back(d_weights.back()->get());
        for (int32_t r = offsets[g]; r < offsets[g + 1]; ++r) {
          for (int32_t o = 0; o < out; ++o) {
            double sum = 0.0;
            for (int32_t i = 0; i < in; ++i) {
              sum += double(x[size_t(r) * x_stride + i]) * double(w.values[size_t(o) * in + i]);
            }
            want[size_t(r) * y_stride + o] = static_cast<float>(sum);
          }
        }
      }
      DeviceArray<float> d_x(x);
      DeviceArray<int32_t> d_offsets(offsets);
      DeviceArray<const void*> d_pointers(pointers);
      DeviceArray<float> d_y(std::vector<float>(want.size(), kSentinelValue));
      const int32_t max_rows = *std::max_element(group_rows.begin(), group_rows.end());
      const cudaError_t launched =
          IsQuantizedDType(dtype)
              ? cuda::QuantGemvGrouped(d_x.get(), x_stride, d_offsets.get(), num_groups, max_rows,
                                       d_pointers.get(), dtype, out, in, d_y.get(), y_stride,
                                       nullptr)
              : cuda::DenseGemvGrouped(d_x.get(), x_stride, d_offsets.get(), num_groups, max_rows,
                                       d_pointers.get(), dtype, out, in, d_y.get(), y_stride,
                                       nullptr);
      ASSERT_EQ(launched, cudaSuccess);
      EXPECT_LE(MaxRelDiff(d_y.ToHost(), want), 2e-5f) << "padding stays the sentinel too";
    }
  }
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
  EXPECT_EQ(cuda::MoeCombine(x, 2, 0, 8, ids, x, x, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::MoeCombine(x, 0, 2, 8, ids, x, x, nullptr), cudaSuccess);
  MoeRouteArgs route;
  route.num_tokens = 1;
  route.num_experts = 4;
  route.logits_stride = 4;
  route.top_k = 5;
  EXPECT_EQ(cuda::MoeRoute(route, nullptr), cudaErrorInvalidValue);
  route.top_k = 2;
  route.logits_stride = 3;
  EXPECT_EQ(cuda::MoeRoute(route, nullptr), cudaErrorInvalidValue);
  const void* const* table = nullptr;
  EXPECT_EQ(cuda::DenseGemvGrouped(x, 8, ids, 70000, 1, table, DType::kBF16, 8, 8, x, 8, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DenseGemvGrouped(x, 8, ids, 2, 1, table, DType::kQ4_0, 8, 8, x, 8, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantGemvGrouped(x, 32, ids, 2, 1, table, DType::kBF16, 8, 32, x, 8, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantGemvGrouped(x, 32, ids, 2, 1, table, DType::kQ4_0, 8, 31, x, 8, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantGemvGrouped(x, 32, ids, 2, 0, table, DType::kQ4_0, 8, 32, x, 8, nullptr),
            cudaSuccess);
}

}  // namespace
}  // namespace loom
