// CpuOps passes block-quantized weights through to the kernels: a Linear group mixing q4_k, q6_k
// and bf16 (as a Q4_K_M file's layers do) and an embedding lookup in a q8_0 table give the values
// of the dequantized weights.
#include "engine/backend/cpu_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/dtype.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/quant_ref.h"

namespace loom {
namespace {

std::vector<float> RandomFloats(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& e : v) e = dist(rng);
  return v;
}

// A [rows, cols] matrix stored in `dtype` and its dequantized f32 values.
struct Matrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

Matrix MakeMatrix(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  const std::vector<float> source = RandomFloats(rows * cols, rng);
  const int64_t row_bytes = DTypeRowBytes(dtype, cols);
  Matrix m;
  m.bytes.resize(static_cast<size_t>(rows * row_bytes));
  m.values.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    ref::QuantizeRow(dtype, source.data() + r * cols, cols, m.bytes.data() + r * row_bytes);
    ref::DequantizeRow(dtype, m.bytes.data() + r * row_bytes, cols, m.values.data() + r * cols);
  }
  return m;
}

// The CPU kernels read low-bit KV codes in the lanes order; a pool in another order is refused at
// load, element formats have no order.
TEST(CpuOpsTest, LowBitKvCachesUseTheLanesOrder) {
  CpuOps ops(1, cpu::MatmulPrecision::kHighest);
  EXPECT_EQ(ops.PackedKvCodeOrder(), KvCodeOrder::kLanes);
  KvFormatSpec format{DType::kKvInt4, false, 128, 32, 32, 8};
  format.code_order = KvCodeOrder::kLanes;
  EXPECT_TRUE(ops.CheckKvFormat(format).ok());
  format.code_order = KvCodeOrder::kRows;
  const absl::Status refused = ops.CheckKvFormat(format);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("cpu"), std::string::npos) << refused.message();
  format.dtype = DType::kBF16;
  EXPECT_TRUE(ops.CheckKvFormat(format).ok());
}

TEST(CpuOpsTest, LinearRunsMixedQuantizedGroup) {
  CpuOps ops(2, cpu::MatmulPrecision::kHighest);
  std::mt19937 rng(3);
  const int64_t k = 512;
  const DType dtypes[3] = {DType::kQ4_K, DType::kQ6_K, DType::kBF16};
  const int64_t ns[3] = {40, 24, 24};
  std::vector<Matrix> matrices;
  std::vector<LinearWeight> weights;
  for (int p = 0; p < 3; ++p) {
    matrices.push_back(MakeMatrix(dtypes[p], ns[p], k, rng));
  }
  for (int p = 0; p < 3; ++p) {
    weights.push_back({{matrices[p].bytes.data(), dtypes[p], ns[p], k}, nullptr});
  }
  for (int32_t rows : {1, 7, 64}) {
    const std::vector<float> x = RandomFloats(rows * k, rng);
    std::vector<std::vector<float>> outs;
    std::vector<LinearOutput> outputs;
    for (int p = 0; p < 3; ++p) outs.emplace_back(static_cast<size_t>(rows * ns[p]));
    for (int p = 0; p < 3; ++p) outputs.push_back({&weights[p], outs[p].data(), ns[p]});
    ops.Linear(x.data(), k, rows, outputs);
    for (int p = 0; p < 3; ++p) {
      std::vector<float> want(static_cast<size_t>(rows * ns[p]));
      ref::Matmul(x.data(), rows, k, k, matrices[p].values.data(), DType::kF32, ns[p], nullptr,
                  want.data(), ns[p]);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(outs[p][i], want[i], 1e-4) << DTypeName(dtypes[p]) << " rows=" << rows;
      }
    }
  }
}

// With int8 activations, decode-sized Linear calls on quantized weights take the int8 GEMV: the
// result moves off the f32 one by about x's rounding (well under 3 % of sum |x w| here, measured
// ~0.5 %), and a prefill-sized call (the GEMM path) stays f32.
TEST(CpuOpsTest, Int8ActivationsReachTheQuantizedGemv) {
  CpuOps f32_ops(2, cpu::MatmulPrecision::kHighest, cpu::QuantActivations::kF32);
  CpuOps int8_ops(2, cpu::MatmulPrecision::kHighest, cpu::QuantActivations::kInt8);
  std::mt19937 rng(6);
  const int64_t k = 512, n = 32;
  const Matrix m = MakeMatrix(DType::kQ4_K, n, k, rng);
  const LinearWeight weight{{m.bytes.data(), DType::kQ4_K, n, k}, nullptr};
  for (int32_t rows : {1, 3, 64}) {
    const std::vector<float> x = RandomFloats(rows * k, rng);
    std::vector<float> y_f32(static_cast<size_t>(rows * n)), y_int8(y_f32.size());
    const LinearOutput out_f32[1] = {{&weight, y_f32.data(), n}};
    const LinearOutput out_int8[1] = {{&weight, y_int8.data(), n}};
    f32_ops.Linear(x.data(), k, rows, out_f32);
    int8_ops.Linear(x.data(), k, rows, out_int8);
    double max_diff = 0;
    for (int32_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double scale = 0;
        for (int64_t kk = 0; kk < k; ++kk) scale += std::fabs(x[r * k + kk] * m.values[j * k + kk]);
        const double diff = std::fabs(double{y_int8[r * n + j]} - y_f32[r * n + j]);
        ASSERT_LE(diff, 0.03 * scale) << "rows=" << rows;
        max_diff = std::max(max_diff, diff);
      }
    }
    if (rows <= 3) {
      EXPECT_GT(max_diff, 0.0) << "rows=" << rows << ": the int8 GEMV did not run";
    } else {
      EXPECT_EQ(max_diff, 0.0) << "rows=" << rows << ": prefill must stay f32";
    }
  }
}

TEST(CpuOpsTest, EmbeddingReadsQuantizedTable) {
  CpuOps ops(2, cpu::MatmulPrecision::kHighest);
  std::mt19937 rng(4);
  const int64_t vocab = 30, dim = 256;
  const Matrix table = MakeMatrix(DType::kQ8_0, vocab, dim, rng);
  const std::vector<int32_t> ids = {29, 0, 7, 7};
  std::vector<float> out(ids.size() * dim);
  ops.Embedding(ids.data(), static_cast<int32_t>(ids.size()),
                {table.bytes.data(), DType::kQ8_0, vocab, dim}, out.data());
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t i = 0; i < dim; ++i) {
      ASSERT_EQ(out[t * dim + i], table.values[ids[t] * dim + i]) << "token " << t;
    }
  }
}

}  // namespace
}  // namespace loom
