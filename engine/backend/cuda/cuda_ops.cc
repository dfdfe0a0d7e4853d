#include "engine/backend/cuda/cuda_ops.h"

#include <algorithm>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "absl/strings/str_cat.h"

#include "engine/backend/cuda/cuda_status.h"
#include "engine/common/logging.h"
#include "kernels/ref/moe_ref.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/decode_attention_kv.h"
#include "kernels/cuda/dense_gemv.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/hadamard.h"
#include "kernels/cuda/kv_write.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"

namespace loom {
namespace {

// cuBLAS's workspace: what NVIDIA recommends for Hopper (32 MiB) is plenty for every shape here.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// Rows of a dequantized weight tile come in multiples of this (a GEMM tile size).
constexpr int64_t kQuantTileRowMultiple = 64;

cudaDataType CudaType(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// Byte offsets of MoeRoute's pinned host buffers (each on a 64-byte boundary).
struct MoeHostOffsets {
  int64_t logits = 0, ids = 0, weights = 0, offsets = 0, grouped_tokens = 0, grouped_weights = 0;
  int64_t total = 0;
};

MoeHostOffsets MoeHostLayout(const OpsLimits& limits) {
  const int64_t t = limits.max_num_tokens;
  const int64_t e = limits.moe_num_experts;
  const int64_t pairs = t * limits.moe_top_k;
  MoeHostOffsets o;
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    const int64_t begin = at;
    at += (bytes + 63) / 64 * 64;
    return begin;
  };
  o.logits = take(t * e * 4);
  o.ids = take(pairs * 4);
  o.weights = take(pairs * 4);
  o.offsets = take((e + 1) * 4);
  o.grouped_tokens = take(pairs * 4);
  o.grouped_weights = take(pairs * 4);
  o.total = std::max<int64_t>(at, 64);
  return o;
}

}  // namespace

int64_t CudaOps::QuantTileRows(int64_t max_in_features) {
  const int64_t rows = kQuantTileBytes / (2 * std::max<int64_t>(max_in_features, 1));
  return std::max(kQuantTileRowMultiple, rows / kQuantTileRowMultiple * kQuantTileRowMultiple);
}

CudaOps::~CudaOps() {
  cudaFree(act16_);
  cudaFree(quant_tile_);
  cudaFree(attention_workspace_);
  cudaFree(cublas_workspace_);
  cudaFreeHost(moe_host_);
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
  quant_tile_rows_ = QuantTileRows(limits.max_in_features);
  LOOM_CUDA_RETURN_IF_ERROR(cudaMalloc(
      &quant_tile_, std::max<int64_t>(quant_tile_rows_ * limits.max_in_features * 2, 256)));
  LOOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
  LOOM_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
  if (limits.moe_num_experts > 0) {
    LOOM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&moe_host_, MoeHostLayout(limits).total));
  }
  reserved_ = true;
  return absl::OkStatus();
}

absl::Status CudaOps::CheckKvFormat(const KvFormatSpec& format) const {
  if (absl::Status layout = CheckKvLayout(format); !layout.ok()) return layout;
  PagedKvView cache;
  cache.dtype = format.dtype;
  cache.num_kv_heads = format.num_kv_heads;
  cache.block_size = format.block_size;
  cache.head_dim = format.head_dim;
  cache.k_per_token = format.k_per_token;
  cache.code_order = format.code_order;
  const bool heads_ok = format.num_kv_heads >= 1 && format.num_heads >= 1 &&
                        format.num_heads % format.num_kv_heads == 0;
  const bool write_ok = !cache.low_bit() || cuda::WriteKvLowBitSupports(cache);
  if (!heads_ok || !write_ok || !cuda::PagedAttentionSupports(cache)) {
    return UnsupportedKvFormat(format, "cuda");
  }
  return absl::OkStatus();
}

void CudaOps::Embedding(const int32_t* token_ids, int32_t num_tokens, const WeightView& table,
                        float* out) {
  if (IsQuantizedDType(table.dtype)) {
    LOOM_CUDA_RECORD(cuda::QuantEmbedding(token_ids, num_tokens, table.data, table.dtype,
                                          static_cast<int32_t>(table.cols), out, stream_));
    return;
  }
  if (!IsFloatDType(table.dtype)) {
    Record(absl::InvalidArgumentError(
        absl::StrCat("CudaOps::Embedding: no CUDA kernel for a table of dtype ",
                     std::string(DTypeName(table.dtype)))));
    return;
  }
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

// Each output by its weight's format: single rows of dense weights and decode-sized batches of
// quantized ones through the GEMV kernels; the rest through cuBLAS, quantized weights tile by
// tile of rows dequantized to bf16; any other dtype is refused (a recorded error, never a wrong
// result).
void CudaOps::Linear(const float* x, int64_t x_stride, int32_t num_rows,
                     std::span<const LinearOutput> outputs) {
  if (num_rows == 0) return;
  LOOM_CHECK(reserved_, "CudaOps used before Reserve");
  LOOM_CHECK(num_rows <= limits_.max_num_tokens, "Linear over ", num_rows, " rows, reserved ",
             limits_.max_num_tokens);
  DType converted = DType::kF32;  // the type act16_ holds for this call (f32: none yet)
  for (const LinearOutput& output : outputs) {
    const WeightView& w = output.weight->weight;
    if (IsFloatDType(w.dtype) && num_rows <= kDenseGemvRows) {
      // The bias is added by the kernel; x stays f32.
      LOOM_CUDA_RECORD(cuda::DenseGemv(x, x_stride, num_rows, w.data, w.dtype,
                                       static_cast<int32_t>(w.rows), static_cast<int32_t>(w.cols),
                                       output.weight->bias, output.out, output.out_stride,
                                       stream_));
      continue;
    }
    if (IsQuantizedDType(w.dtype) && num_rows <= cuda::kQuantGemvMaxRows) {
      // The bias is added by the kernel.
      LOOM_CUDA_RECORD(cuda::QuantGemv(x, x_stride, num_rows, w.data, w.dtype,
                                       static_cast<int32_t>(w.rows), static_cast<int32_t>(w.cols),
                                       output.weight->bias, output.out, output.out_stride,
                                       stream_));
      continue;
    }
    if (IsQuantizedDType(w.dtype)) {
      const void* input = RoundInput(x, x_stride, num_rows, w.cols, DType::kBF16, converted);
      for (int64_t first = 0; first < w.rows; first += quant_tile_rows_) {
        const int64_t tile_rows = std::min(quant_tile_rows_, w.rows - first);
        LOOM_CUDA_RECORD(cuda::DequantizeRows(w.data, w.dtype, first,
                                              static_cast<int32_t>(tile_rows),
                                              static_cast<int32_t>(w.cols), DType::kBF16,
                                              quant_tile_, stream_));
        Gemm(quant_tile_, DType::kBF16, tile_rows, w.cols, input, w.cols, num_rows,
             output.out + first, output.out_stride);
      }
    } else if (w.dtype == DType::kF32) {
      Gemm(w.data, w.dtype, w.rows, w.cols, x, x_stride, num_rows, output.out, output.out_stride);
    } else if (IsFloatDType(w.dtype)) {
      const void* input = RoundInput(x, x_stride, num_rows, w.cols, w.dtype, converted);
      Gemm(w.data, w.dtype, w.rows, w.cols, input, w.cols, num_rows, output.out,
           output.out_stride);
    } else {
      Record(absl::InvalidArgumentError(
          absl::StrCat("CudaOps::Linear: no CUDA kernel for weights of dtype ",
                       std::string(DTypeName(w.dtype)))));
      continue;
    }
    if (output.weight->bias != nullptr) {
      LOOM_CUDA_RECORD(cuda::AddBias(output.out, output.out_stride, num_rows,
                                     static_cast<int32_t>(w.rows), output.weight->bias, stream_));
    }
  }
}

const void* CudaOps::RoundInput(const float* x, int64_t x_stride, int32_t num_rows,
                                int64_t in_features, DType dtype, DType& converted) {
  LOOM_CHECK(in_features <= limits_.max_in_features, "Linear input of ", in_features,
             " features, reserved ", limits_.max_in_features);
  if (converted != dtype) {
    LOOM_CUDA_RECORD(cuda::ConvertRows(x, x_stride, num_rows, static_cast<int32_t>(in_features),
                                       dtype, act16_, stream_));
    converted = dtype;
  }
  return act16_;
}

void CudaOps::Gemm(const void* w, DType dtype, int64_t out_features, int64_t in_features,
                   const void* input, int64_t input_stride, int32_t num_rows, float* out,
                   int64_t out_stride) {
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: out^T [out_features, rows] = W [in, out_features]^T . x^T [in, rows].
  const cudaDataType type = CudaType(dtype);
  const cublasStatus_t status = cublasGemmEx(
      cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out_features), num_rows,
      static_cast<int>(in_features), &alpha, w, type, static_cast<int>(in_features), input, type,
      static_cast<int>(input_stride), &beta, out, CUDA_R_32F, static_cast<int>(out_stride),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) {
    Record(CublasStatus(status, "cublasGemmEx", __FILE__, __LINE__));
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

void CudaOps::HadamardRotate(float* x, int64_t num_rows, int32_t dim) {
  LOOM_CUDA_RECORD(cuda::HadamardRotate(x, num_rows, dim, stream_));
}

void CudaOps::WriteKv(const KvWriteArgs& args) {
  LOOM_CUDA_RECORD(cuda::WriteKv(args, stream_));
}

// Decode rows (one query row per sequence) go to a split-KV kernel (DecodeAttention for bf16 and
// f16 caches, DecodeAttentionKv for fp8 and the low-bit formats), longer query runs to the tiled
// prefill kernel (bf16, f16) or the simple kernel (fp8, low-bit: every format through one load
// function); each skips the other's sequences. Shapes no fast kernel serves (an f32 cache, an
// unusual head size or GQA group) take the simple kernel for every row.
void CudaOps::PagedAttention(const PagedAttentionArgs& args) {
  LOOM_CHECK(args.num_tokens > 0, "PagedAttention needs the host's num_tokens");
  const int32_t min_q = args.min_query_len;
  const int32_t max_q = args.max_query_len > 0 ? args.max_query_len : args.num_tokens;
  const bool compressed = !IsFloatDType(args.cache.dtype);
  const bool fast = compressed ? cuda::DecodeAttentionKvSupports(args)
                               : cuda::DecodeAttentionSupports(args) &&
                                     cuda::PrefillAttentionSupports(args);
  if (!fast) {
    LOOM_CUDA_RECORD(cuda::PagedAttention(args, args.num_tokens, stream_));
    return;
  }
  const int32_t max_seq_len = args.max_blocks_per_seq * args.cache.block_size;
  if (min_q <= 1) {
    LOOM_CHECK(args.num_seqs <= std::max(limits_.max_num_seqs, limits_.max_num_tokens) &&
                   max_seq_len <= std::max(limits_.max_seq_len, args.cache.block_size),
               "attention beyond the reserved workspace");
    if (compressed) {
      LOOM_CUDA_RECORD(cuda::DecodeAttentionKv(args, max_seq_len, attention_workspace_,
                                               attention_workspace_bytes_, stream_));
    } else {
      LOOM_CUDA_RECORD(cuda::DecodeAttention(args, max_seq_len, attention_workspace_,
                                             attention_workspace_bytes_, stream_));
    }
  }
  if (max_q >= 2) {
    if (compressed) {
      LOOM_CUDA_RECORD(cuda::PagedAttention(args, args.num_tokens, stream_,
                                            cuda::PagedAttentionRows::kSkipDecode));
    } else {
      LOOM_CUDA_RECORD(cuda::PrefillAttention(args, max_q, stream_));
    }
  }
}

void CudaOps::MoeRoute(const MoeRouteArgs& args) {
  LOOM_CHECK(args.num_tokens >= 0 && args.num_tokens <= limits_.max_num_tokens &&
                 args.num_experts == limits_.moe_num_experts &&
                 args.top_k == limits_.moe_top_k && moe_host_ != nullptr,
             "MoeRoute beyond the reserved limits");
  if (args.host_expert_offsets == nullptr) {
    LOOM_CUDA_RECORD(cuda::MoeRoute(args, stream_));
    return;
  }
  const int32_t e = args.num_experts;
  std::fill(args.host_expert_offsets, args.host_expert_offsets + e + 1, 0);
  if (args.num_tokens == 0) return;
  const MoeHostOffsets at = MoeHostLayout(limits_);
  char* base = static_cast<char*>(moe_host_);
  MoeRouteArgs host = args;
  host.logits = reinterpret_cast<const float*>(base + at.logits);
  host.logits_stride = e;
  host.expert_ids = reinterpret_cast<int32_t*>(base + at.ids);
  host.expert_weights = reinterpret_cast<float*>(base + at.weights);
  host.expert_offsets = reinterpret_cast<int32_t*>(base + at.offsets);
  host.grouped_tokens = reinterpret_cast<int32_t*>(base + at.grouped_tokens);
  host.grouped_weights = reinterpret_cast<float*>(base + at.grouped_weights);
  // The copy back of the previous sparse layer's routing read these buffers: it is ordered
  // before this copy on the stream, so the wait below covers it too.
  const cudaError_t copied = cudaMemcpy2DAsync(
      base + at.logits, sizeof(float) * e, args.logits, sizeof(float) * args.logits_stride,
      sizeof(float) * e, args.num_tokens, cudaMemcpyDeviceToHost, stream_);
  const cudaError_t waited = copied == cudaSuccess ? cudaStreamSynchronize(stream_) : copied;
  if (waited != cudaSuccess) {
    LOOM_CUDA_RECORD(waited);
    return;
  }
  if (!error_.ok()) return;  // the logits may be garbage after an earlier failure
  ref::MoeRoute(host);
  std::copy(host.expert_offsets, host.expert_offsets + e + 1, args.host_expert_offsets);
  const size_t pairs = static_cast<size_t>(args.num_tokens) * args.top_k;
  const struct {
    void* dst;
    const void* src;
    size_t bytes;
  } back[] = {{args.expert_ids, host.expert_ids, pairs * 4},
              {args.expert_weights, host.expert_weights, pairs * 4},
              {args.expert_offsets, host.expert_offsets, (static_cast<size_t>(e) + 1) * 4},
              {args.grouped_tokens, host.grouped_tokens, pairs * 4},
              {args.grouped_weights, host.grouped_weights, pairs * 4}};
  for (const auto& c : back) {
    LOOM_CUDA_RECORD(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyHostToDevice, stream_));
  }
}

namespace {

// One projection of every expert of a layer: the weight pointers in device memory.
struct ProjectionTable {
  const void* const* weights = nullptr;  // [num_experts], device memory
  DType dtype = DType::kBF16;
  int32_t out_features = 0;
  int32_t in_features = 0;
};

class CudaExpertTable final : public ExpertTable {
 public:
  ~CudaExpertTable() override { cudaFree(pointers); }
  void* pointers = nullptr;  // [3, num_experts] device pointers: gate, up, down
  std::vector<const void*> host;  // what UpdateExpertTable last copied (the copy's source)
  int32_t num_experts = 0;
  ProjectionTable gate, up, down;
};

// The projection `which` of every expert, checked for the grouped GEMVs.
absl::Status CheckProjection(std::span<const ExpertWeights> experts,
                             const LinearWeight ExpertWeights::*which, const char* name,
                             std::vector<const void*>& pointers, ProjectionTable& out) {
  const WeightView& first = (experts[0].*which).weight;
  out.dtype = first.dtype;
  out.out_features = static_cast<int32_t>(first.rows);
  out.in_features = static_cast<int32_t>(first.cols);
  const bool quantized = IsQuantizedDType(first.dtype);
  if (!quantized && !IsFloatDType(first.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no grouped GEMV for ", name, " weights of dtype ",
                     std::string(DTypeName(first.dtype))));
  }
  const int64_t alignment = quantized ? cuda::QuantWeightAlignment(first.dtype) : 16;
  const int64_t vector = quantized ? 1 : 16 / DTypeSize(first.dtype);
  if (first.cols % vector != 0 || (quantized && !RowFitsBlocks(first.dtype, first.cols)) ||
      first.rows > INT32_MAX || first.cols > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("expert ", name, " rows of ", first.cols,
                                                   " elements do not fit the grouped GEMV"));
  }
  for (size_t e = 0; e < experts.size(); ++e) {
    const LinearWeight& w = experts[e].*which;
    if (w.bias != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("expert ", e, " has a ", name, " bias"));
    }
    if (w.weight.data == nullptr || w.weight.dtype != first.dtype ||
        w.weight.rows != first.rows || w.weight.cols != first.cols ||
        reinterpret_cast<uintptr_t>(w.weight.data) % static_cast<uintptr_t>(alignment) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert ", e, "'s ", name, " weights differ in format, shape or alignment "
                       "from expert 0's"));
    }
    pointers.push_back(w.weight.data);
  }
  return absl::OkStatus();
}

// y = x . W_g^T for each expert g's rows, through the table.
cudaError_t GroupedGemv(const float* x, int64_t x_stride, const int32_t* offsets,
                        int32_t num_experts, int32_t max_rows, const ProjectionTable& t, float* y,
                        int64_t y_stride, cudaStream_t stream) {
  return IsQuantizedDType(t.dtype)
             ? cuda::QuantGemvGrouped(x, x_stride, offsets, num_experts, max_rows, t.weights,
                                      t.dtype, t.out_features, t.in_features, y, y_stride, stream)
             : cuda::DenseGemvGrouped(x, x_stride, offsets, num_experts, max_rows, t.weights,
                                      t.dtype, t.out_features, t.in_features, y, y_stride, stream);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertTable>> CudaOps::CreateExpertTable(
    std::span<const ExpertWeights> experts) {
  if (experts.empty() || experts.size() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("a grouped expert table of ", experts.size(), " experts"));
  }
  auto table = std::make_unique<CudaExpertTable>();
  table->num_experts = static_cast<int32_t>(experts.size());
  std::vector<const void*> pointers;
  pointers.reserve(3 * experts.size());
  if (absl::Status s = CheckProjection(experts, &ExpertWeights::gate, "gate", pointers,
                                       table->gate);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckProjection(experts, &ExpertWeights::up, "up", pointers, table->up);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckProjection(experts, &ExpertWeights::down, "down", pointers,
                                       table->down);
      !s.ok()) {
    return s;
  }
  const int32_t inter = table->gate.out_features;
  const int32_t hidden = table->gate.in_features;
  if (table->up.out_features != inter || table->up.in_features != hidden ||
      table->down.out_features != hidden || table->down.in_features != inter ||
      hidden % 4 != 0 || inter % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert shapes (hidden ", hidden, ", intermediate ", inter, ") do not fit the grouped "
        "GEMV (consistent gate, up and down; sizes multiples of 4)"));
  }
  const size_t bytes = pointers.size() * sizeof(void*);
  table->host = pointers;
  LOOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&table->pointers, bytes));
  LOOM_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(table->pointers, pointers.data(), bytes, cudaMemcpyHostToDevice));
  const auto* device = static_cast<const void* const*>(table->pointers);
  table->gate.weights = device;
  table->up.weights = device + experts.size();
  table->down.weights = device + 2 * experts.size();
  return table;
}

void CudaOps::UpdateExpertTable(ExpertTable& table, std::span<const ExpertWeights> experts) {
  auto& t = static_cast<CudaExpertTable&>(table);
  LOOM_CHECK(static_cast<int32_t>(experts.size()) == t.num_experts, "an expert table of ",
             t.num_experts, " experts updated with ", experts.size());
  const size_t n = experts.size();
  for (size_t e = 0; e < n; ++e) {
    const ExpertWeights& w = experts[e];
    LOOM_CHECK(w.gate.weight.dtype == t.gate.dtype && w.up.weight.dtype == t.up.dtype &&
                   w.down.weight.dtype == t.down.dtype,
               "expert ", e, " changed format in its table");
    t.host[e] = w.gate.weight.data;
    t.host[n + e] = w.up.weight.data;
    t.host[2 * n + e] = w.down.weight.data;
  }
  // From pageable memory: the driver has taken the bytes when the call returns.
  LOOM_CUDA_RECORD(cudaMemcpyAsync(t.pointers, t.host.data(), t.host.size() * sizeof(void*),
                                   cudaMemcpyHostToDevice, stream_));
}

void CudaOps::MoeGroupedExperts(const MoeGroupedArgs& a) {
  const auto& t = *static_cast<const CudaExpertTable*>(a.table);
  LOOM_CHECK(a.num_rows <= limits_.max_num_tokens && a.num_tokens <= kMaxGroupedExpertTokens,
             "grouped experts beyond the reserved limits");
  if (a.num_rows == 0) return;
  const int32_t inter = t.gate.out_features;
  const int32_t hidden = t.gate.in_features;
  LOOM_CUDA_RECORD(GroupedGemv(a.x, hidden, a.expert_offsets, t.num_experts, a.num_tokens, t.gate,
                               a.gate, inter, stream_));
  LOOM_CUDA_RECORD(GroupedGemv(a.x, hidden, a.expert_offsets, t.num_experts, a.num_tokens, t.up,
                               a.up, inter, stream_));
  LOOM_CUDA_RECORD(
      cuda::SiluMul(a.gate, inter, a.up, inter, a.num_rows, inter, a.gate, inter, stream_));
  LOOM_CUDA_RECORD(GroupedGemv(a.gate, inter, a.expert_offsets, t.num_experts, a.num_tokens,
                               t.down, a.out, hidden, stream_));
}

void CudaOps::MoeCombine(const float* rows, int32_t num_tokens, int32_t top_k, int32_t dim,
                         const int32_t* token_rows, const float* weights, float* out) {
  LOOM_CUDA_RECORD(
      cuda::MoeCombine(rows, num_tokens, top_k, dim, token_rows, weights, out, stream_));
}

void CudaOps::GatherRows(const float* x, int64_t x_stride, const int32_t* rows,
                         int32_t num_rows, int32_t dim, float* out) {
  LOOM_CUDA_RECORD(cuda::GatherRows(x, x_stride, rows, num_rows, dim, out, stream_));
}

void CudaOps::MoeInitOutput(const float* shared, const float* gate_logits, int32_t num_tokens,
                            int32_t dim, float* out) {
  LOOM_CUDA_RECORD(cuda::MoeInitOutput(shared, gate_logits, num_tokens, dim, out, stream_));
}

void CudaOps::MoeScatterAdd(const float* rows, int32_t num_rows, int32_t dim,
                            const int32_t* tokens, const float* weights, float* out) {
  LOOM_CUDA_RECORD(cuda::MoeScatterAdd(rows, num_rows, dim, tokens, weights, out, stream_));
}

}  // namespace loom
