// The CUDA implementation of Ops: every op queues kernels of kernels/cuda (and cuBLAS for the
// matmuls) on the backend's one stream and returns at once.
//
// Numerics. Activations stay f32 in device memory, as on the CPU. A Linear of one row (a batch-1
// decode step) with f32, bf16 or f16 weights goes to the GEMV kernel (kernels/cuda/dense_gemv.h),
// which keeps the input in f32 and sums in f32, as the CPU backend does. A larger one with bf16
// or f16 weights first rounds its input rows to the weights' type (one conversion shared by all
// the outputs of the call) and multiplies on the tensor cores with f32 accumulation and f32
// output (cublasGemmEx, CUBLAS_COMPUTE_32F); f32 weights multiply in full f32. That rounding of
// the activations is the one difference from the CPU backend's f32 matmuls, worth ~3 significant
// digits per matmul input (the model-level tolerance of tests/gpu/model_parity_test.cc).
// Block-quantized weights (q8_0 ... q6_k): up to cuda::kQuantGemvMaxRows input rows go to the
// GEMV kernel (kernels/cuda/quant_matmul.h), which dequantizes in registers and keeps the input
// in f32; larger batches round the input to bf16 and multiply tile by tile: kQuantTileBytes of
// weight rows dequantized to bf16 in a workspace, then cublasGemmEx as for bf16 weights. A
// quantized embedding table is dequantized row by row (exactly, as ref::DequantizeRow). A
// weight dtype without a kernel is recorded as InvalidArgument, never computed.
//
// Mixture-of-experts. Steps of up to kMaxGroupedExpertTokens tokens whose experts are all
// resident run them grouped: the routing is computed on the device (cuda::MoeRoute), each
// projection of every expert is one grouped GEMV launch that finds the experts' weights through
// the layer's ExpertTable (device memory: the slot table) and their rows through the routing's
// offsets, and MoeCombine adds each token's rows. Nothing waits for the host, so such decode
// steps are CUDA graphs. Larger steps, and every step of a model behind an expert cache, copy the
// router's logits to the host and route there with the reference's code (ref::MoeRoute: the CPU
// backend's arithmetic, ties broken as torch.topk breaks them), and the routing is copied back;
// the block then sizes each expert's matmuls from the per-expert row counts. So MoeRoute waits
// for the stream once per sparse layer, and those steps run without graphs. The copies are small
// (a decode step of 8 experts, top 2: 32 bytes of logits per token). Gather, init, scatter-add
// and combine are kernels/cuda/moe.h; the experts' matmuls are Linear calls like any other.
//
// Errors. Ops return nothing: the first failure of a launch or a cuBLAS call is kept (with its
// call site) and reported by TakeError, which the backend's Synchronize calls. Sizes beyond the
// Reserve'd limits are programming errors (LOOM_CHECK): the step path never allocates.
//
// Thread safety: one thread drives it (the engine loop), like every Ops.
#pragma once

#include <cstdint>
#include <span>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "engine/backend/kv_format_check.h"
#include "engine/backend/ops.h"

namespace loom {

class CudaOps final : public Ops {
 public:
  // The stream and handle belong to the backend and outlive this object.
  CudaOps(cudaStream_t stream, cublasHandle_t cublas) : stream_(stream), cublas_(cublas) {}
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  // The most rows a Linear with dense weights sends to cuda::DenseGemv instead of cuBLAS. On an
  // H200 (bench/kernels/cuda_gemv_bench.cc) the kernel reads one row's weights at 0.88-1.0 of the
  // copy bandwidth (cuBLAS: 0.76-0.98) and small matrices in a third of cuBLAS's time, but its
  // cost grows with the rows (each weight vector is multiplied with every x row, read from
  // cache): at 2 rows it is level with cuBLAS and at 8 rows 2.2-3.5x slower.
  static constexpr int32_t kDenseGemvRows = 1;
  // Bytes of the bf16 tile that quantized weights are dequantized into for a Linear of more
  // than cuda::kQuantGemvMaxRows rows (small enough to stay in the L2 cache between the
  // dequantization and the GEMM that reads it).
  static constexpr int64_t kQuantTileBytes = int64_t{16} << 20;
  // Weight rows per dequantized tile when Linear inputs are at most max_in_features wide: a
  // multiple of 64, at least 64.
  static int64_t QuantTileRows(int64_t max_in_features);

  // Allocates the workspace: 16-bit copies of the widest Linear input, the bf16 tile for
  // quantized weights (QuantTileRows(max_in_features) rows of max_in_features), the split-KV
  // partial results of the decode attention, and cuBLAS's own workspace (set on the handle so
  // that cuBLAS never allocates, which CUDA graph capture requires).
  absl::Status Reserve(const OpsLimits& limits) override;

  // Every float and block-quantized format.
  bool SupportsWeightFormat(DType dtype) const override {
    return IsFloatDType(dtype) || IsQuantizedDType(dtype);
  }
  // The KV formats whose write and attention kernels exist (kernels/cuda/kv_write.h,
  // paged_attention.h, decode_attention*.h): f32, bf16 and f16 with head_dim in [1, 256]; fp8
  // E4M3 likewise; int8, int4 and int2 (K per channel or per token) with head_dim a multiple of
  // 32 up to 256 and block_size 16, 32, 64 or 128. Any GQA group: groups above
  // cuda::kDecodeAttentionMaxGroup, or head_dim not 64/128/256, run on the simple paged kernel.
  absl::Status CheckKvFormat(const KvFormatSpec& format) const override;
  void Embedding(const int32_t* token_ids, int32_t num_tokens, const WeightView& table,
                 float* out) override;
  void RmsNorm(const float* x, int64_t x_stride, int32_t num_rows, int32_t dim,
               const WeightView& weight, float eps, float* out, int64_t out_stride) override;
  void AddRmsNorm(float* residual, const float* delta, int32_t num_rows, int32_t dim,
                  const WeightView& weight, float eps, float* out) override;
  void Add(float* residual, const float* delta, int64_t num_elements) override;
  void Linear(const float* x, int64_t x_stride, int32_t num_rows,
              std::span<const LinearOutput> outputs) override;
  void Rope(float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads, int32_t head_dim,
            const float* cos, const float* sin) override;
  void HadamardRotate(float* x, int64_t num_rows, int32_t dim) override;
  void SiluMul(const float* gate, const float* up, int32_t num_rows, int32_t dim,
               float* out) override;
  void WriteKv(const KvWriteArgs& args) override;
  void PagedAttention(const PagedAttentionArgs& args) override;

  bool SupportsMoe() const override { return true; }
  // With args.host_expert_offsets: waits for the stream (the logits), routes on the host, queues
  // the copies back; after a failure the host offsets are all 0 (no expert runs) and the error is
  // recorded. Without (the grouped experts' steps): routes on the device (cuda::MoeRoute).
  void MoeRoute(const MoeRouteArgs& args) override;
  void GatherRows(const float* x, int64_t x_stride, const int32_t* rows, int32_t num_rows,
                  int32_t dim, float* out) override;
  void MoeInitOutput(const float* shared, const float* gate_logits, int32_t num_tokens,
                     int32_t dim, float* out) override;
  void MoeScatterAdd(const float* rows, int32_t num_rows, int32_t dim, const int32_t* tokens,
                     const float* weights, float* out) override;

  // Grouped experts: each projection of every expert in one launch of the grouped GEMV
  // (cuda::DenseGemvGrouped, cuda::QuantGemvGrouped), which reads the routing's offsets and the
  // table's weight pointers on the device. One block serves up to 8 rows of one expert, so an
  // expert with more rows reads its weights once per 8; up to 16 tokens (16 rows per expert at
  // most) that costs little next to what the graph of the step saves, and larger steps route on
  // the host and multiply with cuBLAS.
  static constexpr int32_t kMaxGroupedExpertTokens = 16;
  int32_t MaxGroupedExpertTokens() const override { return kMaxGroupedExpertTokens; }
  // Refuses (InvalidArgument) experts with biases, projections whose format differs between
  // experts or has no GEMV kernel, misaligned weights, or a hidden or intermediate size that is
  // not a multiple of 4. Copies the weight pointers to device memory (synchronously: at load).
  absl::StatusOr<std::unique_ptr<ExpertTable>> CreateExpertTable(
      std::span<const ExpertWeights> experts) override;
  // Copies the new pointers from host memory on the stream (the table keeps a host copy).
  void UpdateExpertTable(ExpertTable& table, std::span<const ExpertWeights> experts) override;
  void MoeGroupedExperts(const MoeGroupedArgs& args) override;
  void MoeCombine(const float* rows, int32_t num_tokens, int32_t top_k, int32_t dim,
                  const int32_t* token_rows, const float* weights, float* out) override;

  // Keeps `status` when it is the first failure since the last TakeError.
  void Record(absl::Status status);
  // The first failure since the last call (OK when none), and forgets it.
  absl::Status TakeError();

 private:
  void RecordCuda(cudaError_t error, const char* what, int line);
  // x rounded to `dtype` in act16_ (converted only when `converted` says act16_ holds another
  // type; updated).
  const void* RoundInput(const float* x, int64_t x_stride, int32_t num_rows, int64_t in_features,
                         DType dtype, DType& converted);
  // out[r, o] = input[r, :] . w[o, :] for w [out_features, in_features] and input of `dtype`
  // (f32, bf16 or f16), through cublasGemmEx with f32 accumulation and output.
  void Gemm(const void* w, DType dtype, int64_t out_features, int64_t in_features,
            const void* input, int64_t input_stride, int32_t num_rows, float* out,
            int64_t out_stride);

  cudaStream_t stream_;
  cublasHandle_t cublas_;
  OpsLimits limits_;
  bool reserved_ = false;
  // Linear inputs rounded to 16 bits: [max_num_tokens, max_in_features].
  void* act16_ = nullptr;
  int64_t act16_bytes_ = 0;
  // Dequantized weight rows: [quant_tile_rows_, max_in_features] bf16.
  void* quant_tile_ = nullptr;
  int64_t quant_tile_rows_ = 0;
  void* attention_workspace_ = nullptr;
  size_t attention_workspace_bytes_ = 0;
  void* cublas_workspace_ = nullptr;
  // Pinned host memory for MoeRoute (OpsLimits::moe_num_experts > 0): the logits [T, E], then
  // the routing [T, K] ids and weights, offsets [E + 1], grouped tokens and weights [T * K].
  void* moe_host_ = nullptr;
  absl::Status error_;
};

}  // namespace loom
