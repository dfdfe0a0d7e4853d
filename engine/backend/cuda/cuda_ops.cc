#include "engine/backend/cuda/cuda_ops.h"

#include <algorithm>

#include <cublas_v2.h>

#include "engine/backend/cuda/cuda_status.h"
#include "engine/common/logging.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/kv_write.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"

namespace loom {
namespace {

// cuBLAS's workspace: what NVIDIA recommends for Hopper (32 MiB) is plenty for every shape here.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

cudaDataType CudaType(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

}  // namespace

CudaOps::~CudaOps() {
  cudaFree(act16_);
  cudaFree(attention_workspace_);
  cudaFree(cublas_workspace_);
}

void CudaOps::Record(absl::Status status) {
  if (error_.ok() && !status.ok()) error_ = std::move(status);
}

absl::Status CudaOps::TakeError() {
  absl::Status error = std::move(error_);
  error_ = absl::OkStatus();
  return error;
}

void CudaOps::RecordCuda(cudaError_t error, const char* what, int line) {
  if (error != cudaSuccess) Record(CudaStatus(error, what, __FILE__, line));
}

#define LOOM_CUDA_RECORD(expr) RecordCuda((expr), #expr, __LINE__)

absl::Status CudaOps::Reserve(const OpsLimits& limits) {
  LOOM_CHECK(!reserved_, "CudaOps::Reserve called twice");
  limits_ = limits;
  act16_bytes_ = int64_t{limits.max_num_tokens} * limits.max_in_features * 2;
  LOOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&act16_, std::max<int64_t>(act16_bytes_, 256)));
  attention_workspace_bytes_ = cuda::DecodeAttentionWorkspaceBytes(
      std::max(limits.max_num_seqs, limits.max_num_tokens), limits.num_heads, limits.head_dim,
      limits.max_seq_len);
  LOOM_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&attention_workspace_, std::max<size_t>(attention_workspace_bytes_, 256)));
  LOOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
  LOOM_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
  reserved_ = true;
  return absl::OkStatus();
}

void CudaOps::Embedding(const int32_t* token_ids, int32_t num_tokens, const WeightView& table,
                        float* out) {
  LOOM_CUDA_RECORD(cuda::Embedding(token_ids, num_tokens, table.data, table.dtype,
                                   static_cast<int32_t>(table.cols), out, stream_));
}

void CudaOps::RmsNorm(const float* x, int64_t x_stride, int32_t num_rows, int32_t dim,
                      const WeightView& weight, float eps, float* out, int64_t out_stride) {
  LOOM_CUDA_RECORD(cuda::RmsNorm(x, x_stride, num_rows, dim, weight.data, weight.dtype, eps, out,
                                 out_stride, stream_));
}

void CudaOps::AddRmsNorm(float* residual, const float* delta, int32_t num_rows, int32_t dim,
                         const WeightView& weight, float eps, float* out) {
  LOOM_CUDA_RECORD(cuda::AddRmsNorm(residual, delta, num_rows, dim, weight.data, weight.dtype,
                                    eps, out, stream_));
}

void CudaOps::Add(float* residual, const float* delta, int64_t num_elements) {
  LOOM_CUDA_RECORD(cuda::Add(residual, delta, num_elements, stream_));
}

void CudaOps::Linear(const float* x, int64_t x_stride, int32_t num_rows,
                     std::span<const LinearOutput> outputs) {
  if (num_rows == 0) return;
  LOOM_CHECK(reserved_, "CudaOps used before Reserve");
  LOOM_CHECK(num_rows <= limits_.max_num_tokens, "Linear over ", num_rows, " rows, reserved ",
             limits_.max_num_tokens);
  const float alpha = 1.0f, beta = 0.0f;
  DType converted = DType::kF32;  // the type act16_ holds for this call (f32: none yet)
  for (const LinearOutput& output : outputs) {
    const WeightView& w = output.weight->weight;
    const int64_t in = w.cols;
    const void* input = x;
    int64_t input_stride = x_stride;
    if (w.dtype != DType::kF32) {
      LOOM_CHECK(in <= limits_.max_in_features, "Linear input of ", in, " features, reserved ",
                 limits_.max_in_features);
      if (converted != w.dtype) {
        LOOM_CUDA_RECORD(cuda::ConvertRows(x, x_stride, num_rows, static_cast<int32_t>(in),
                                           w.dtype, act16_, stream_));
        converted = w.dtype;
      }
      input = act16_;
      input_stride = in;
    }
    // Column-major view: out^T [out_features, rows] = W [in, out_features]^T . x^T [in, rows].
    const cudaDataType type = CudaType(w.dtype);
    const cublasStatus_t status = cublasGemmEx(
        cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), num_rows,
        static_cast<int>(in), &alpha, w.data, type, static_cast<int>(in), input, type,
        static_cast<int>(input_stride), &beta, output.out, CUDA_R_32F,
        static_cast<int>(output.out_stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (status != CUBLAS_STATUS_SUCCESS) {
      Record(CublasStatus(status, "cublasGemmEx", __FILE__, __LINE__));
    }
    if (output.weight->bias != nullptr) {
      LOOM_CUDA_RECORD(cuda::AddBias(output.out, output.out_stride, num_rows,
                                     static_cast<int32_t>(w.rows), output.weight->bias, stream_));
    }
  }
}

void CudaOps::Rope(float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads,
                   int32_t head_dim, const float* cos, const float* sin) {
  LOOM_CUDA_RECORD(
      cuda::Rope(x, x_stride, num_tokens, num_heads, head_dim, head_dim, cos, sin, stream_));
}

void CudaOps::SiluMul(const float* gate, const float* up, int32_t num_rows, int32_t dim,
                      float* out) {
  LOOM_CUDA_RECORD(cuda::SiluMul(gate, dim, up, dim, num_rows, dim, out, dim, stream_));
}

void CudaOps::WriteKv(const KvWriteArgs& args) {
  LOOM_CUDA_RECORD(cuda::WriteKv(args, stream_));
}

// Decode rows (one query row per sequence) go to the split-KV kernel, longer query runs to the
// tiled prefill kernel; each skips the other's sequences. Shapes either does not serve (an f32
// cache, an unusual head size) take the simple kernel for every row.
void CudaOps::PagedAttention(const PagedAttentionArgs& args) {
  LOOM_CHECK(args.num_tokens > 0, "PagedAttention needs the host's num_tokens");
  const int32_t min_q = args.min_query_len;
  const int32_t max_q = args.max_query_len > 0 ? args.max_query_len : args.num_tokens;
  if (!cuda::DecodeAttentionSupports(args) || !cuda::PrefillAttentionSupports(args)) {
    LOOM_CUDA_RECORD(cuda::PagedAttention(args, args.num_tokens, stream_));
    return;
  }
  const int32_t max_seq_len = args.max_blocks_per_seq * args.cache.block_size;
  if (min_q <= 1) {
    LOOM_CHECK(args.num_seqs <= std::max(limits_.max_num_seqs, limits_.max_num_tokens) &&
                   max_seq_len <= std::max(limits_.max_seq_len, args.cache.block_size),
               "attention beyond the reserved workspace");
    LOOM_CUDA_RECORD(cuda::DecodeAttention(args, max_seq_len, attention_workspace_,
                                           attention_workspace_bytes_, stream_));
  }
  if (max_q >= 2) {
    LOOM_CUDA_RECORD(cuda::PrefillAttention(args, max_q, stream_));
  }
}

}  // namespace loom
