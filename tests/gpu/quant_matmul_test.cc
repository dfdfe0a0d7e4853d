// Parity of the CUDA kernels for block-quantized weights (kernels/cuda/quant_matmul.h) and of the
// CUDA backend's quantized Linear and Embedding with a plain host reference: ref::DequantizeRow of
// the same bytes, then an f32 matmul accumulated in double. Every format (q8_0, q4_0, q4_1, q4_k,
// q5_k, q6_k); batches of 1, 2, 3, 8 rows (the GEMV kernel) and 16, 64, 130 rows (bf16 tiles and
// cuBLAS); odd output counts, reductions of whole, partial and several kernel chunks, strided
// inputs and outputs, bias on and off, weights spanning several dequantized tiles. The argument
// checks run without a device; everything else is skipped without one.
//
// Tolerances (of max(1, max |reference|)):
//   GEMV (rows <= 8)   2e-5 against the f32 reference: f32 accumulation in another order and
//                      fused multiply-adds in the dequantization, a few ulp of the sums.
//   Tiled (rows > 8)   2e-5 against the reference computed from bf16-rounded inputs and weights
//                      (what the tensor cores multiply, exactly, with f32 accumulation), and
//                      1e-2 against the f32 reference (two bf16 roundings per product).
//   Dequantization     exact: f32 output bit-identical to ref::DequantizeRow, bf16 output its
//                      round-to-nearest-even.
// A wrong nibble, scale, min or high bit changes outputs by about the size of the weights.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_ops.h"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/ref/quant_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::DeviceArray;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

constexpr float kGemvTolerance = 2e-5f;
constexpr float kTiledTolerance = 2e-5f;
constexpr float kTiledToF32Tolerance = 1e-2f;
constexpr float kSentinel = -7.0f;

constexpr DType kFormats[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                              DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// Reduction lengths for a format: one block, a partial kernel chunk (1024 elements) after a whole
// one, several chunks and a partial one; for the 32-element formats also an odd number of blocks.
std::vector<int64_t> InFeatures(DType dtype) {
  std::vector<int64_t> out = {256, 1280, 4352};
  if (TraitsOf(dtype).block_elems == 32) out.push_back(96);
  return out;
}

// A random matrix stored in `dtype`, and the values the reference decodes from its bytes.
struct QuantMatrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows, cols]
};

QuantMatrix MakeQuantMatrix(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t row_bytes = DTypeRowBytes(dtype, cols);
  QuantMatrix m{std::vector<uint8_t>(size_t(rows * row_bytes)), std::vector<float>(rows * cols)};
  std::normal_distribution<float> shift(0.0f, 0.5f);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row = RandomFloats(size_t(cols), rng);
    const float offset = shift(rng);  // rows whose values are not centred: non-trivial minimums
    for (float& v : row) v += offset;
    ref::QuantizeRow(dtype, row.data(), cols, m.bytes.data() + r * row_bytes);
    ref::DequantizeRow(dtype, m.bytes.data() + r * row_bytes, cols, m.values.data() + r * cols);
  }
  return m;
}

float RoundToBf16(float v) { return Bf16ToF32(F32ToBf16(v)); }

std::vector<float> RoundedToBf16(std::vector<float> values) {
  for (float& v : values) v = RoundToBf16(v);
  return values;
}

// out[r, o] (at out + r * out_stride + o) = sum_i x[r, i] * w[o, i] (+ bias[o]), in double.
void ReferenceMatmul(const std::vector<float>& x, int64_t x_stride, int32_t num_rows,
                     const std::vector<float>& w, int64_t out_features, int64_t in_features,
                     const float* bias, float* out, int64_t out_stride) {
  for (int32_t r = 0; r < num_rows; ++r) {
    for (int64_t o = 0; o < out_features; ++o) {
      double sum = bias != nullptr ? bias[o] : 0.0;
      for (int64_t i = 0; i < in_features; ++i) {
        sum += double(x[r * x_stride + i]) * double(w[o * in_features + i]);
      }
      out[r * out_stride + o] = static_cast<float>(sum);
    }
  }
}

class QuantMatmulTest : public gpu_test::GpuTest {};

// The GEMV kernel on its own: every row count it serves, an input that starts one float off
// 16-byte alignment with padded rows, outputs with padding that must stay untouched.
TEST_F(QuantMatmulTest, GemvMatchesReference) {
  std::mt19937 rng(11);
  for (DType dtype : kFormats) {
    for (int32_t rows = 1; rows <= cuda::kQuantGemvMaxRows; ++rows) {
      // One chunk with several groups per lane, several chunks, a partial chunk.
      const int64_t in = rows % 3 == 0 ? 1280 : (rows % 3 == 1 ? 14336 : 4352);
      const int32_t out = rows % 3 == 0 ? 1 : 67;
      const bool with_bias = rows % 2 == 1;
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " rows=" << rows << " in=" << in
                                      << " out=" << out << " bias=" << with_bias);
      const QuantMatrix w = MakeQuantMatrix(dtype, out, in, rng);
      const int64_t x_stride = in + 5, y_stride = out + 3;
      const std::vector<float> x = RandomFloats(1 + size_t(rows) * x_stride, rng);
      const std::vector<float> bias = RandomFloats(size_t(out), rng);
      std::vector<float> want(size_t(rows) * y_stride, kSentinel);
      const std::vector<float> x_rows(x.begin() + 1, x.end());
      ReferenceMatmul(x_rows, x_stride, rows, w.values, out, in,
                      with_bias ? bias.data() : nullptr, want.data(), y_stride);

      DeviceArray<uint8_t> d_w(w.bytes);
      DeviceArray<float> d_x(x), d_bias(bias), d_y(std::vector<float>(want.size(), kSentinel));
      ASSERT_EQ(cuda::QuantGemv(d_x.get() + 1, x_stride, rows, d_w.get(), dtype, out,
                                static_cast<int32_t>(in), with_bias ? d_bias.get() : nullptr,
                                d_y.get(), y_stride, nullptr),
                cudaSuccess);
      const std::vector<float> got = d_y.ToHost();
      EXPECT_LT(MaxRelDiff(got, want), kGemvTolerance);
      for (int32_t r = 0; r < rows; ++r) {
        for (int64_t c = out; c < y_stride; ++c) EXPECT_EQ(got[r * y_stride + c], kSentinel);
      }
    }
  }
}

TEST_F(QuantMatmulTest, DequantizeRowsIsExact) {
  std::mt19937 rng(13);
  for (DType dtype : kFormats) {
    for (int64_t cols : InFeatures(dtype)) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " cols=" << cols);
      const int64_t rows = 11, first = 3;
      const int32_t count = 7;
      const QuantMatrix w = MakeQuantMatrix(dtype, rows, cols, rng);
      const std::vector<float> want_f32(w.values.begin() + first * cols,
                                        w.values.begin() + (first + count) * cols);
      std::vector<uint16_t> want_bf16(want_f32.size());
      for (size_t i = 0; i < want_f32.size(); ++i) want_bf16[i] = F32ToBf16(want_f32[i]);

      DeviceArray<uint8_t> d_w(w.bytes);
      DeviceArray<float> d_f32(std::vector<float>(want_f32.size(), kSentinel));
      DeviceArray<uint16_t> d_bf16(std::vector<uint16_t>(want_bf16.size(), 0xffff));
      ASSERT_EQ(cuda::DequantizeRows(d_w.get(), dtype, first, count, static_cast<int32_t>(cols),
                                     DType::kF32, d_f32.get(), nullptr),
                cudaSuccess);
      ASSERT_EQ(cuda::DequantizeRows(d_w.get(), dtype, first, count, static_cast<int32_t>(cols),
                                     DType::kBF16, d_bf16.get(), nullptr),
                cudaSuccess);
      EXPECT_EQ(d_f32.ToHost(), want_f32);
      EXPECT_EQ(d_bf16.ToHost(), want_bf16);
    }
  }
}

TEST_F(QuantMatmulTest, EmbeddingIsExact) {
  std::mt19937 rng(17);
  for (DType dtype : kFormats) {
    for (int64_t dim : InFeatures(dtype)) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " dim=" << dim);
      const int64_t vocab = 37;
      const QuantMatrix table = MakeQuantMatrix(dtype, vocab, dim, rng);
      std::uniform_int_distribution<int32_t> token(0, vocab - 1);
      std::vector<int32_t> ids(9);
      for (int32_t& id : ids) id = token(rng);
      ids.front() = vocab - 1;
      ids.back() = 0;
      // The output starts one float in; the float before it must stay untouched.
      std::vector<float> want(1 + ids.size() * dim, kSentinel);
      for (size_t t = 0; t < ids.size(); ++t) {
        std::copy_n(table.values.begin() + ids[t] * dim, dim, want.begin() + 1 + t * dim);
      }
      DeviceArray<uint8_t> d_table(table.bytes);
      DeviceArray<int32_t> d_ids(ids);
      DeviceArray<float> d_out(std::vector<float>(want.size(), kSentinel));
      ASSERT_EQ(cuda::QuantEmbedding(d_ids.get(), static_cast<int32_t>(ids.size()),
                                     d_table.get(), dtype, static_cast<int32_t>(dim),
                                     d_out.get() + 1, nullptr),
                cudaSuccess);
      EXPECT_EQ(d_out.ToHost(), want);
    }
  }
}

// Argument checks come before any CUDA call, so this runs with or without a device.
TEST(QuantMatmulArguments, RejectsBadSizesFormatsAndAlignment) {
  const float* x = nullptr;
  float* y = nullptr;
  const void* aligned = reinterpret_cast<const void*>(uintptr_t{256});
  EXPECT_EQ(cuda::QuantWeightAlignment(DType::kQ4_K), 16);
  EXPECT_EQ(cuda::QuantWeightAlignment(DType::kQ5_K), 16);
  EXPECT_EQ(cuda::QuantWeightAlignment(DType::kQ4_1), 4);
  EXPECT_EQ(cuda::QuantWeightAlignment(DType::kQ8_0), 2);
  EXPECT_EQ(cuda::QuantWeightAlignment(DType::kQ6_K), 2);
  EXPECT_EQ(cuda::QuantWeightAlignment(DType::kBF16), 0);
  // Too many rows, a float dtype, rows that are not whole blocks, short strides, misalignment.
  EXPECT_EQ(cuda::QuantGemv(x, 256, cuda::kQuantGemvMaxRows + 1, aligned, DType::kQ8_0, 4, 256,
                            nullptr, y, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantGemv(x, 256, 1, aligned, DType::kBF16, 4, 256, nullptr, y, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantGemv(x, 48, 1, aligned, DType::kQ8_0, 4, 48, nullptr, y, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantGemv(x, 128, 1, aligned, DType::kQ4_K, 4, 128, nullptr, y, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantGemv(x, 255, 1, aligned, DType::kQ6_K, 4, 256, nullptr, y, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantGemv(x, 256, 2, aligned, DType::kQ6_K, 4, 256, nullptr, y, 3, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantGemv(x, 256, -1, aligned, DType::kQ4_0, 4, 256, nullptr, y, 4, nullptr),
            cudaErrorInvalidValue);
  const void* off8 = reinterpret_cast<const void*>(uintptr_t{264});
  const void* off1 = reinterpret_cast<const void*>(uintptr_t{257});
  EXPECT_EQ(cuda::QuantGemv(x, 256, 1, off8, DType::kQ4_K, 4, 256, nullptr, y, 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantGemv(x, 256, 1, off1, DType::kQ8_0, 4, 256, nullptr, y, 4, nullptr),
            cudaErrorInvalidValue);
  // Nothing to do: no launch, success.
  EXPECT_EQ(cuda::QuantGemv(x, 256, 0, aligned, DType::kQ4_K, 4, 256, nullptr, y, 4, nullptr),
            cudaSuccess);
  EXPECT_EQ(cuda::QuantGemv(x, 256, 3, off8, DType::kQ8_0, 0, 256, nullptr, y, 0, nullptr),
            cudaSuccess);

  void* out = nullptr;
  EXPECT_EQ(cuda::DequantizeRows(aligned, DType::kQ4_0, 0, 2, 64, DType::kF16, out, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DequantizeRows(aligned, DType::kF32, 0, 2, 64, DType::kF32, out, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DequantizeRows(aligned, DType::kQ5_K, 0, 2, 300, DType::kBF16, out, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DequantizeRows(aligned, DType::kQ5_K, -1, 2, 256, DType::kBF16, out, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::DequantizeRows(aligned, DType::kQ5_K, 0, 0, 256, DType::kBF16, out, nullptr),
            cudaSuccess);
  EXPECT_EQ(cuda::QuantEmbedding(nullptr, -1, aligned, DType::kQ6_K, 256, y, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantEmbedding(nullptr, 0, aligned, DType::kBF16, 256, y, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::QuantEmbedding(nullptr, 0, aligned, DType::kQ6_K, 256, y, nullptr),
            cudaSuccess);
}

// ---- the CUDA backend's ops ----

constexpr int64_t kMaxInFeatures = 4352;

class CudaQuantOpsTest : public gpu_test::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    auto backend = CudaBackend::Create({.kind = BackendKind::kCuda});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
    OpsLimits limits;
    limits.max_num_tokens = 130;
    limits.max_in_features = kMaxInFeatures;
    limits.max_num_seqs = 16;
    limits.num_heads = 8;
    limits.head_dim = 128;
    limits.max_seq_len = 256;
    ASSERT_TRUE(backend_->ops().Reserve(limits).ok());
  }
  void* Upload(const void* host, int64_t bytes) {
    auto buffer = backend_->Allocate(bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    backend_->CopyToDevice(buffer->data(), host, bytes);
    buffers_.push_back(std::move(*buffer));
    return buffers_.back().data();
  }
  template <typename T>
  T* Upload(const std::vector<T>& host) {
    return static_cast<T*>(Upload(host.data(), int64_t(host.size() * sizeof(T))));
  }
  std::vector<float> Download(const float* device, size_t count) {
    std::vector<float> host(count);
    backend_->CopyToHost(host.data(), device, int64_t(count * sizeof(float)));
    EXPECT_TRUE(backend_->Synchronize().ok());
    return host;
  }
  // Frees what the previous case uploaded (the device memory a long loop would otherwise hold).
  void FreeUploads() { buffers_.clear(); }

  // Two quantized outputs of one Linear call sharing the input x [rows, in] (row stride in + 3),
  // written side by side into one output buffer with 3 padding columns; compared with the
  // reference for the path the row count takes, and the padding checked untouched.
  void CheckLinear(DType dtype, int32_t rows, int64_t in, int64_t out_a, int64_t out_b,
                   bool with_bias, std::mt19937& rng);

  std::unique_ptr<CudaBackend> backend_;
  std::vector<DeviceBuffer> buffers_;
};

void CudaQuantOpsTest::CheckLinear(DType dtype, int32_t rows, int64_t in, int64_t out_a,
                                   int64_t out_b, bool with_bias, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " rows=" << rows << " in=" << in
                                  << " out=" << out_a << "+" << out_b << " bias=" << with_bias);
  const QuantMatrix wa = MakeQuantMatrix(dtype, out_a, in, rng);
  const QuantMatrix wb = MakeQuantMatrix(dtype, out_b, in, rng);
  const int64_t x_stride = in + 3, out_stride = out_a + out_b + 3;
  const std::vector<float> x = RandomFloats(size_t(rows) * x_stride, rng);
  const std::vector<float> bias_a = RandomFloats(size_t(out_a), rng);
  const std::vector<float> bias_b = RandomFloats(size_t(out_b), rng);
  const float* ba = with_bias ? bias_a.data() : nullptr;
  const float* bb = with_bias ? bias_b.data() : nullptr;
  std::vector<float> want(size_t(rows) * out_stride, kSentinel);
  ReferenceMatmul(x, x_stride, rows, wa.values, out_a, in, ba, want.data(), out_stride);
  ReferenceMatmul(x, x_stride, rows, wb.values, out_b, in, bb, want.data() + out_a, out_stride);

  LinearWeight la{{Upload(wa.bytes), dtype, out_a, in}, with_bias ? Upload(bias_a) : nullptr};
  LinearWeight lb{{Upload(wb.bytes), dtype, out_b, in}, with_bias ? Upload(bias_b) : nullptr};
  float* dy = Upload(std::vector<float>(want.size(), kSentinel));
  const LinearOutput outputs[] = {{&la, dy, out_stride}, {&lb, dy + out_a, out_stride}};
  backend_->ops().Linear(Upload(x), x_stride, rows, outputs);
  ASSERT_TRUE(backend_->Synchronize().ok());
  const std::vector<float> got = Download(dy, want.size());

  if (rows <= cuda::kQuantGemvMaxRows) {
    EXPECT_LT(MaxRelDiff(got, want), kGemvTolerance);
  } else {
    std::vector<float> want_bf16(want.size(), kSentinel);
    const std::vector<float> x16 = RoundedToBf16(x);
    ReferenceMatmul(x16, x_stride, rows, RoundedToBf16(wa.values), out_a, in, ba,
                    want_bf16.data(), out_stride);
    ReferenceMatmul(x16, x_stride, rows, RoundedToBf16(wb.values), out_b, in, bb,
                    want_bf16.data() + out_a, out_stride);
    EXPECT_LT(MaxRelDiff(got, want_bf16), kTiledTolerance);
    EXPECT_LT(MaxRelDiff(got, want), kTiledToF32Tolerance);
  }
  for (int32_t r = 0; r < rows; ++r) {
    for (int64_t c = out_a + out_b; c < out_stride; ++c) {
      ASSERT_EQ(got[r * out_stride + c], kSentinel) << "row " << r << " column " << c;
    }
  }
  FreeUploads();
}

TEST_F(CudaQuantOpsTest, LinearMatchesReference) {
  std::mt19937 rng(19);
  const int64_t out_counts[] = {1, 7, 257};
  int case_index = 0;
  for (DType dtype : kFormats) {
    for (int32_t rows : {1, 2, 3, 8, 16, 64, 130}) {
      for (int64_t in : InFeatures(dtype)) {
        const int64_t out_a = out_counts[case_index % 3];
        CheckLinear(dtype, rows, in, out_a, 33, case_index % 2 == 0, rng);
        ++case_index;
      }
    }
  }
}

// More output features than one dequantized tile holds: the tiles must land at their columns.
TEST_F(CudaQuantOpsTest, TiledLinearSpansSeveralTiles) {
  const int64_t tile_rows = CudaOps::QuantTileRows(kMaxInFeatures);
  const int64_t out = 2 * tile_rows + 67;
  std::mt19937 rng(23);
  for (DType dtype : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    CheckLinear(dtype, 16, kMaxInFeatures, out, 5, true, rng);
  }
}

TEST_F(CudaQuantOpsTest, EmbeddingMatchesReference) {
  std::mt19937 rng(29);
  for (DType dtype : kFormats) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t vocab = 50, dim = 512;
    const QuantMatrix table = MakeQuantMatrix(dtype, vocab, dim, rng);
    const std::vector<int32_t> ids = {49, 0, 7, 7, 31};
    std::vector<float> want(ids.size() * dim);
    for (size_t t = 0; t < ids.size(); ++t) {
      std::copy_n(table.values.begin() + ids[t] * dim, dim, want.begin() + t * dim);
    }
    float* out = Upload(std::vector<float>(want.size(), kSentinel));
    backend_->ops().Embedding(Upload(ids), static_cast<int32_t>(ids.size()),
                              {Upload(table.bytes), dtype, vocab, dim}, out);
    ASSERT_TRUE(backend_->Synchronize().ok());
    EXPECT_EQ(Download(out, want.size()), want);
    FreeUploads();
  }
}

// A weight format without a CUDA kernel is an InvalidArgument from Synchronize that names it,
// the output is left alone, and the backend keeps working.
TEST_F(CudaQuantOpsTest, UnsupportedWeightDtypesAreErrors) {
  const std::vector<uint8_t> bytes(64 * 64, 1);
  std::vector<float> x(4 * 64, 1.0f);
  float* dy = Upload(std::vector<float>(4 * 64, kSentinel));
  LinearWeight w{{Upload(bytes), DType::kI8, 64, 64}, nullptr};
  const LinearOutput outputs[] = {{&w, dy, 64}};
  backend_->ops().Linear(Upload(x), 64, 4, outputs);
  absl::Status status = backend_->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("i8"), std::string_view::npos) << status;
  EXPECT_EQ(Download(dy, 4 * 64), std::vector<float>(4 * 64, kSentinel));

  const std::vector<int32_t> ids = {1};
  backend_->ops().Embedding(Upload(ids), 1, {Upload(bytes), DType::kI32, 16, 64}, dy);
  status = backend_->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("i32"), std::string_view::npos) << status;

  backend_->ops().Add(dy, dy, 4);
  EXPECT_TRUE(backend_->Synchronize().ok());
}

}  // namespace
}  // namespace loom
