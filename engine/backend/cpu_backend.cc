#include "engine/backend/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/common/logging.h"
#include "engine/common/strings.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/moe.h"

namespace loom {

CpuOps::CpuOps(int num_threads, cpu::MatmulPrecision precision,
               cpu::QuantActivations quant_activations)
    : pool_(num_threads) {
  matmul_options_.precision = precision;
  matmul_options_.quant_activations = quant_activations;
}

CpuOps::~CpuOps() { std::free(workspace_); }

void* CpuOps::Workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  std::free(workspace_);
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  workspace_ = std::aligned_alloc(64, rounded);
  LOOM_CHECK(workspace_ != nullptr, "cannot allocate ", rounded, " bytes of CPU workspace");
  workspace_bytes_ = rounded;
  return workspace_;
}

void CpuOps::Embedding(const int32_t* token_ids, int32_t num_tokens, const WeightView& table,
                       float* out) {
  cpu::Embedding(pool_, token_ids, num_tokens, table.data, table.dtype,
                 static_cast<int32_t>(table.cols), out);
}

void CpuOps::RmsNorm(const float* x, int64_t x_stride, int32_t num_rows, int32_t dim,
                     const WeightView& weight, float eps, float* out, int64_t out_stride) {
  cpu::RmsNorm(pool_, x, x_stride, num_rows, dim, weight.data, weight.dtype, eps, out, out_stride);
}

void CpuOps::AddRmsNorm(float* residual, const float* delta, int32_t num_rows, int32_t dim,
                        const WeightView& weight, float eps, float* out) {
  cpu::AddRmsNorm(pool_, residual, delta, num_rows, dim, weight.data, weight.dtype, eps, out);
}

void CpuOps::Add(float* residual, const float* delta, int64_t num_elements) {
  cpu::Add(pool_, residual, delta, num_elements);
}

void CpuOps::Linear(const float* x, int64_t x_stride, int32_t num_rows,
                    std::span<const LinearOutput> outputs) {
  if (num_rows == 0 || outputs.empty()) return;
  const int64_t k = outputs[0].weight->in_features();
  cpu::MatmulProjection projections[8];
  LOOM_CHECK(outputs.size() <= 8, "at most 8 projections share one input");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const LinearWeight& w = *outputs[i].weight;
    LOOM_CHECK(w.in_features() == k, "projections sharing an input differ in in_features");
    projections[i] = {w.weight.data, w.weight.dtype, w.out_features(), w.bias, outputs[i].out,
                      outputs[i].out_stride};
  }
  const cpu::MatmulInput input{x, num_rows, k, x_stride};
  const size_t bytes = cpu::MatmulWorkspaceBytes(num_rows, k, pool_.num_threads(), matmul_options_);
  void* workspace = bytes > 0 ? Workspace(bytes) : nullptr;
  const cpu::MatmulStatus status =
      cpu::MatmulGroup(input, std::span(projections, outputs.size()), pool_, workspace, bytes,
                       matmul_options_);
  LOOM_CHECK(status == cpu::MatmulStatus::kOk, "matmul failed: ", cpu::MatmulStatusName(status));
}

void CpuOps::Rope(float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads,
                  int32_t head_dim, const float* cos, const float* sin) {
  cpu::Rope(pool_, x, x_stride, num_tokens, num_heads, head_dim, head_dim, cos, sin);
}

void CpuOps::HadamardRotate(float* x, int64_t num_rows, int32_t dim) {
  cpu::HadamardRotate(pool_, x, num_rows, dim);
}

void CpuOps::SiluMul(const float* gate, const float* up, int32_t num_rows, int32_t dim,
                     float* out) {
  cpu::SiluMul(pool_, gate, dim, up, dim, num_rows, dim, out, dim);
}

void CpuOps::WriteKv(const KvWriteArgs& args) { cpu::WriteKv(pool_, args); }

void CpuOps::PagedAttention(const PagedAttentionArgs& args) {
  const size_t bytes = cpu::PagedAttentionWorkspaceBytes(args, pool_.num_threads());
  cpu::PagedAttention(pool_, args, Workspace(bytes));
}

void CpuOps::MoeRoute(const MoeRouteArgs& args) {
  cpu::MoeRoute(pool_, args);
  if (args.host_expert_offsets != nullptr && args.host_expert_offsets != args.expert_offsets) {
    std::memcpy(args.host_expert_offsets, args.expert_offsets,
                sizeof(int32_t) * (static_cast<size_t>(args.num_experts) + 1));
  }
}

void CpuOps::GatherRows(const float* x, int64_t x_stride, const int32_t* rows, int32_t num_rows,
                        int32_t dim, float* out) {
  cpu::GatherRows(pool_, x, x_stride, rows, num_rows, dim, out);
}

void CpuOps::MoeInitOutput(const float* shared, const float* gate_logits, int32_t num_tokens,
                           int32_t dim, float* out) {
  cpu::MoeInitOutput(pool_, shared, gate_logits, num_tokens, dim, out);
}

void CpuOps::MoeScatterAdd(const float* rows, int32_t num_rows, int32_t dim,
                           const int32_t* tokens, const float* weights, float* out) {
  cpu::MoeScatterAdd(pool_, rows, num_rows, dim, tokens, weights, out);
}

namespace {

// On the CPU the table is the experts themselves: the host reads the routing directly.
class CpuExpertTable final : public ExpertTable {
 public:
  explicit CpuExpertTable(std::span<const ExpertWeights> experts)
      : experts(experts.begin(), experts.end()) {}
  std::vector<ExpertWeights> experts;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertTable>> CpuOps::CreateExpertTable(
    std::span<const ExpertWeights> experts) {
  if (experts.empty() || static_cast<int64_t>(experts.size()) > kMaxMoeExperts) {
    return absl::InvalidArgumentError(StrCat("an expert table of ", experts.size(), " experts"));
  }
  return std::make_unique<CpuExpertTable>(experts);
}

void CpuOps::UpdateExpertTable(ExpertTable& table, std::span<const ExpertWeights> experts) {
  auto& entries = static_cast<CpuExpertTable&>(table).experts;
  LOOM_CHECK(entries.size() == experts.size(), "an expert table of ", entries.size(),
             " experts updated with ", experts.size());
  std::copy(experts.begin(), experts.end(), entries.begin());
}

void CpuOps::MoeGroupedExperts(const MoeGroupedArgs& a) {
  const auto& experts = static_cast<const CpuExpertTable*>(a.table)->experts;
  for (size_t e = 0; e < experts.size(); ++e) {
    const int32_t first = a.expert_offsets[e];
    const int32_t rows = a.expert_offsets[e + 1] - first;
    if (rows == 0) continue;
    const ExpertWeights& w = experts[e];
    const int64_t inter = w.gate.out_features();
    const int64_t hidden = w.gate.in_features();
    float* gate = a.gate + first * inter;
    float* up = a.up + first * inter;
    const LinearOutput gate_up[] = {{&w.gate, gate, inter}, {&w.up, up, inter}};
    Linear(a.x + first * hidden, hidden, rows, gate_up);
    SiluMul(gate, up, rows, static_cast<int32_t>(inter), gate);
    const LinearOutput down[] = {{&w.down, a.out + first * hidden, hidden}};
    Linear(gate, inter, rows, down);
  }
}

void CpuOps::MoeCombine(const float* rows, int32_t num_tokens, int32_t top_k, int32_t dim,
                        const int32_t* token_rows, const float* weights, float* out) {
  cpu::MoeCombine(pool_, rows, num_tokens, top_k, dim, token_rows, weights, out);
}

CpuBackend::CpuBackend(const BackendOptions& options)
    : ops_(options.num_threads,
           options.fast_bf16_matmul ? cpu::MatmulPrecision::kBf16 : cpu::MatmulPrecision::kHighest,
           options.int8_activations ? cpu::QuantActivations::kInt8 : cpu::QuantActivations::kF32),
      pretend_graphs_(options.pretend_graphs) {}

absl::StatusOr<DeviceBuffer> CpuBackend::Allocate(int64_t bytes) {
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  void* data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(StrCat("cannot allocate ", bytes, " bytes of host memory"));
  }
  return DeviceBuffer(this, data, bytes);
}

void CpuBackend::Free(void* data, int64_t) { std::free(data); }

namespace {

// The CPU's memory is the host's: a copy queue is a memcpy.
class MemcpyQueue final : public CopyQueue {
 public:
  absl::Status CopyToDevice(void* device_dst, const void* host_src, int64_t bytes) override {
    std::memcpy(device_dst, host_src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<HostMemory> CpuBackend::AllocateHost(int64_t bytes) {
  constexpr size_t kPage = 4096;
  const size_t rounded = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + kPage - 1) / kPage *
                         kPage;
  auto* data = static_cast<uint8_t*>(std::aligned_alloc(kPage, rounded));
  if (data == nullptr) {
    return absl::ResourceExhaustedError(StrCat("cannot allocate ", bytes, " bytes of host memory"));
  }
  return HostMemory(data, HostMemoryRelease{&std::free});
}

absl::StatusOr<std::unique_ptr<CopyQueue>> CpuBackend::CreateCopyQueue() {
  return std::make_unique<MemcpyQueue>();
}

void CpuBackend::CopyToDevice(void* device_dst, const void* host_src, int64_t bytes) {
  std::memcpy(device_dst, host_src, static_cast<size_t>(bytes));
}

void CpuBackend::CopyToHost(void* host_dst, const void* device_src, int64_t bytes) {
  std::memcpy(host_dst, device_src, static_cast<size_t>(bytes));
}

void CpuBackend::CopyWithinDevice(void* device_dst, const void* device_src, int64_t bytes) {
  std::memmove(device_dst, device_src, static_cast<size_t>(bytes));
}

}  // namespace loom
