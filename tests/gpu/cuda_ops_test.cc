// The CUDA backend's ops and memory (engine/backend/cuda) against kernels/ref: Linear through
// the GEMV kernel (one row) and cuBLAS for f32, bf16 and f16 weights with biases, several
// outputs sharing one input, strided inputs and outputs and odd sizes; the residual add; copies;
// CUDA graph capture and replay; errors as Status. Skipped without a device.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/api/executor.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/cuda_status.h"
#include "kernels/ref/matmul_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::AsDType;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

class CudaOpsTest : public gpu_test::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    auto backend = CudaBackend::Create({.kind = BackendKind::kCuda});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
    OpsLimits limits;
    limits.max_num_tokens = 300;
    limits.max_in_features = 1000;
    limits.max_num_seqs = 16;
    limits.num_heads = 8;
    limits.head_dim = 128;
    limits.max_seq_len = 4096;
    ASSERT_TRUE(backend_->ops().Reserve(limits).ok());
  }
  // Device copy of host bytes, owned by the test.
  void* Upload(const void* host, int64_t bytes) {
    auto buffer = backend_->Allocate(bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    backend_->CopyToDevice(buffer->data(), host, bytes);
    buffers_.push_back(std::move(*buffer));
    return buffers_.back().data();
  }
  template <typename T>
  std::vector<T> Download(const void* device, size_t count) {
    std::vector<T> host(count);
    backend_->CopyToHost(host.data(), device, int64_t(count * sizeof(T)));
    EXPECT_TRUE(backend_->Synchronize().ok());
    return host;
  }

  std::unique_ptr<CudaBackend> backend_;
  std::vector<DeviceBuffer> buffers_;
};

struct LinearCase {
  int32_t rows;
  int64_t in, out_a, out_b;
  int64_t x_stride;  // >= in
  DType dtype;
  bool bias;
};

TEST_F(CudaOpsTest, LinearMatchesTheReference) {
  std::mt19937 rng(7);
  const LinearCase cases[] = {
      {1, 64, 64, 32, 64, DType::kBF16, false},   {1, 1000, 999, 3, 1000, DType::kBF16, true},
      {7, 96, 128, 128, 100, DType::kF16, true},  {300, 256, 512, 17, 256, DType::kBF16, false},
      {33, 80, 40, 40, 81, DType::kF32, true},    {2, 1, 5, 1, 1, DType::kF32, false},
      {129, 512, 513, 64, 600, DType::kF16, false}};
  for (const LinearCase& c : cases) {
    SCOPED_TRACE(testing::Message() << c.rows << "x" << c.in << " -> " << c.out_a << "+" << c.out_b
                                    << " " << DTypeName(c.dtype));
    const std::vector<float> x = RandomFloats(size_t(c.rows) * c.x_stride, rng);
    std::vector<float> w_a = RandomFloats(size_t(c.out_a) * c.in, rng, 0.05f);
    std::vector<float> w_b = RandomFloats(size_t(c.out_b) * c.in, rng, 0.05f);
    const std::vector<float> bias_a = RandomFloats(size_t(c.out_a), rng);
    const std::vector<float> bias_b = RandomFloats(size_t(c.out_b), rng);
    const std::vector<uint8_t> wa_bytes = AsDType(w_a, c.dtype), wb_bytes = AsDType(w_b, c.dtype);
    // The reference sees the input rounded as the backend rounds it for 16-bit weights on
    // cuBLAS (more rows than the backend gives the GEMV kernel, which keeps x in f32).
    std::vector<float> x_rounded = x;
    if (c.dtype != DType::kF32 && c.rows > CudaOps::kDenseGemvRows) {
      for (float& v : x_rounded) {
        uint8_t b[2];
        StoreFromF32(b, c.dtype, 0, v);
        v = LoadAsF32(b, c.dtype, 0);
      }
    }
    // Both outputs in one buffer: a at columns [0, out_a), b after it, 3 columns of padding.
    const int64_t out_stride = c.out_a + c.out_b + 3;
    std::vector<float> want(size_t(c.rows) * out_stride, 0.0f);
    ref::Matmul(x_rounded.data(), c.rows, c.in, c.x_stride, wa_bytes.data(), c.dtype, c.out_a,
                c.bias ? bias_a.data() : nullptr, want.data(), out_stride);
    ref::Matmul(x_rounded.data(), c.rows, c.in, c.x_stride, wb_bytes.data(), c.dtype, c.out_b,
                c.bias ? bias_b.data() : nullptr, want.data() + c.out_a, out_stride);

    auto bias = [&](const std::vector<float>& b) {
      return c.bias ? static_cast<const float*>(Upload(b.data(), int64_t(b.size() * 4))) : nullptr;
    };
    LinearWeight la{{Upload(wa_bytes.data(), int64_t(wa_bytes.size())), c.dtype, c.out_a, c.in},
                    bias(bias_a)};
    LinearWeight lb{{Upload(wb_bytes.data(), int64_t(wb_bytes.size())), c.dtype, c.out_b, c.in},
                    bias(bias_b)};
    const float* dx = static_cast<const float*>(Upload(x.data(), int64_t(x.size() * 4)));
    std::vector<float> zeros(want.size(), 0.0f);
    float* dy = static_cast<float*>(Upload(zeros.data(), int64_t(zeros.size() * 4)));
    const LinearOutput outputs[] = {{&la, dy, out_stride}, {&lb, dy + c.out_a, out_stride}};
    backend_->ops().Linear(dx, c.x_stride, c.rows, outputs);
    ASSERT_TRUE(backend_->Synchronize().ok());
    const std::vector<float> got = Download<float>(dy, want.size());
    // f32 accumulation in another order; f32 weights without TF32.
    EXPECT_LE(MaxRelDiff(got, want), 2e-5f);
  }
}

TEST_F(CudaOpsTest, AddAndCopies) {
  std::mt19937 rng(3);
  const std::vector<float> a = RandomFloats(1001, rng), b = RandomFloats(1001, rng);
  float* da = static_cast<float*>(Upload(a.data(), 1001 * 4));
  float* db = static_cast<float*>(Upload(b.data(), 1001 * 4));
  backend_->ops().Add(da, db, 1001);
  std::vector<float> want(1001);
  for (int i = 0; i < 1001; ++i) want[i] = a[i] + b[i];
  EXPECT_EQ(Download<float>(da, 1001), want);
  backend_->CopyWithinDevice(db, da, 1001 * 4);
  EXPECT_EQ(Download<float>(db, 1001), want);
}

// A captured graph replays the same work on new contents of the same buffers.
TEST_F(CudaOpsTest, GraphsReplayOnNewInputs) {
  std::vector<float> a(256, 1.0f), b(256, 2.0f);
  float* da = static_cast<float*>(Upload(a.data(), 256 * 4));
  float* db = static_cast<float*>(Upload(b.data(), 256 * 4));
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(backend_->RunGraph(42, [&] { backend_->ops().Add(da, db, 256); }).ok());
    ASSERT_TRUE(backend_->Synchronize().ok());
  }
  EXPECT_EQ(backend_->num_graphs(), 1);
  EXPECT_EQ(Download<float>(da, 256), std::vector<float>(256, 7.0f));
  b.assign(256, -1.0f);
  backend_->CopyToDevice(db, b.data(), 256 * 4);
  ASSERT_TRUE(backend_->RunGraph(42, [&] { FAIL() << "replays must not enqueue again"; }).ok());
  EXPECT_EQ(Download<float>(da, 256), std::vector<float>(256, 6.0f));
}

// A launch error (an op given impossible sizes) comes back from Synchronize as a Status with the
// call site, not fatal; the backend keeps working afterwards.
TEST_F(CudaOpsTest, LaunchErrorsBecomeStatus) {
  std::vector<float> a(16, 1.0f);
  float* da = static_cast<float*>(Upload(a.data(), 64));
  backend_->ops().Add(da, da, -5);
  const absl::Status status = backend_->Synchronize();
  EXPECT_FALSE(status.ok());
  EXPECT_FALSE(IsFatalDeviceError(status));
  EXPECT_NE(status.message().find("cuda_ops.cc"), std::string_view::npos) << status;
  backend_->ops().Add(da, da, 16);
  EXPECT_TRUE(backend_->Synchronize().ok());
  EXPECT_EQ(Download<float>(da, 16), std::vector<float>(16, 2.0f));
}

TEST(CudaStatusTest, StickyErrorsAreFatal) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x", "f", 1).ok());
  const absl::Status illegal = CudaStatus(cudaErrorIllegalAddress, "kernel", "file.cc", 12);
  EXPECT_TRUE(IsFatalDeviceError(illegal));
  EXPECT_NE(illegal.message().find("kernel at file.cc:12"), std::string_view::npos) << illegal;
  EXPECT_FALSE(IsFatalDeviceError(CudaStatus(cudaErrorInvalidValue, "x", "f", 1)));
  EXPECT_EQ(CudaStatus(cudaErrorMemoryAllocation, "x", "f", 1).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(IsFatalDeviceError(CublasStatus(CUBLAS_STATUS_EXECUTION_FAILED, "gemm", "f", 1)));
}

}  // namespace
}  // namespace loom
