// The CPU backend: host memory, a thread pool, and the kernels of kernels/cpu behind Ops.
#pragma once

#include <memory>

#include "engine/backend/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace loom {

class CpuOps final : public Ops {
 public:
  CpuOps(int num_threads, cpu::MatmulPrecision precision,
         cpu::QuantActivations quant_activations = cpu::QuantActivations::kF32);
  ~CpuOps() override;

  cpu::ThreadPool& pool() { return pool_; }

  // Every float and block-quantized format.
  bool SupportsWeightFormat(DType dtype) const override {
    return IsFloatDType(dtype) || IsQuantizedDType(dtype);
  }
  // The CPU kernels read low-bit codes in dot-product lanes.
  KvCodeOrder PackedKvCodeOrder() const override { return cpu::kKvCodeOrder; }
  // Every KV format within the packed layout's rules (CheckKvLayout), in the lanes order.
  absl::Status CheckKvFormat(const KvFormatSpec& format) const override {
    if (IsLowBitKvDType(format.dtype) && format.code_order != cpu::kKvCodeOrder) {
      return UnsupportedKvFormat(format, "cpu");
    }
    return CheckKvLayout(format);
  }
  void Embedding(const int32_t* token_ids, int32_t num_tokens, const WeightView& table,
                 float* out) override;
  void HadamardRotate(float* x, int64_t num_rows, int32_t dim) override;
  void RmsNorm(const float* x, int64_t x_stride, int32_t num_rows, int32_t dim,
               const WeightView& weight, float eps, float* out, int64_t out_stride) override;
  void AddRmsNorm(float* residual, const float* delta, int32_t num_rows, int32_t dim,
                  const WeightView& weight, float eps, float* out) override;
  void Add(float* residual, const float* delta, int64_t num_elements) override;
  void Linear(const float* x, int64_t x_stride, int32_t num_rows,
              std::span<const LinearOutput> outputs) override;
  void Rope(float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads, int32_t head_dim,
            const float* cos, const float* sin) override;
  void SiluMul(const float* gate, const float* up, int32_t num_rows, int32_t dim,
               float* out) override;
  void WriteKv(const KvWriteArgs& args) override;
  void PagedAttention(const PagedAttentionArgs& args) override;
  bool SupportsMoe() const override { return true; }
  void MoeRoute(const MoeRouteArgs& args) override;
  void GatherRows(const float* x, int64_t x_stride, const int32_t* rows, int32_t num_rows,
                  int32_t dim, float* out) override;
  void MoeInitOutput(const float* shared, const float* gate_logits, int32_t num_tokens,
                     int32_t dim, float* out) override;
  void MoeScatterAdd(const float* rows, int32_t num_rows, int32_t dim, const int32_t* tokens,
                     const float* weights, float* out) override;
  // The grouped experts compute exactly what the block's expert-by-expert path computes (the
  // same Linear and SiluMul calls on the same rows), so steps of up to this many tokens take
  // them and the model tests check both paths against the same goldens.
  static constexpr int32_t kMaxGroupedExpertTokens = 64;
  int32_t MaxGroupedExpertTokens() const override { return kMaxGroupedExpertTokens; }
  absl::StatusOr<std::unique_ptr<ExpertTable>> CreateExpertTable(
      std::span<const ExpertWeights> experts) override;
  void UpdateExpertTable(ExpertTable& table, std::span<const ExpertWeights> experts) override;
  void MoeGroupedExperts(const MoeGroupedArgs& args) override;
  void MoeCombine(const float* rows, int32_t num_tokens, int32_t top_k, int32_t dim,
                  const int32_t* token_rows, const float* weights, float* out) override;

 private:
  // Scratch for matmul and attention, grown on demand (only while the largest step shape is
  // first seen), 64-byte aligned.
  void* Workspace(size_t bytes);

  cpu::ThreadPool pool_;
  cpu::MatmulOptions matmul_options_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options);
  std::string_view name() const override { return "cpu"; }
  Ops& ops() override { return ops_; }
  CpuOps& cpu_ops() { return ops_; }
  absl::StatusOr<DeviceBuffer> Allocate(int64_t bytes) override;
  void Free(void* data, int64_t bytes) override;
  void CopyToDevice(void* device_dst, const void* host_src, int64_t bytes) override;
  void CopyToHost(void* host_dst, const void* device_src, int64_t bytes) override;
  void CopyWithinDevice(void* device_dst, const void* device_src, int64_t bytes) override;
  void CopyToHostAsync(void* host_dst, const void* device_src, int64_t bytes) override {
    CopyToHost(host_dst, device_src, bytes);
  }
  absl::Status WaitForHostCopies() override { return absl::OkStatus(); }
  absl::StatusOr<HostMemory> AllocateHost(int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<CopyQueue>> CreateCopyQueue() override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
  bool host_memory() const override { return true; }
  bool supports_graphs() const override { return pretend_graphs_; }

 private:
  CpuOps ops_;
  bool pretend_graphs_ = false;
};

}  // namespace loom
