// The explicit list of operations a model's forward pass is built from (shared/ARCHITECTURE.md
// §4). Layers call only these; each backend (CPU here, CUDA when built) implements all of them
// on its own memory. Activations are f32; weights keep their checkpoint dtype and are used in
// place; shapes use named dims and every buffer is row-major with the given row stride.
//
// Thread safety: an Ops object is used by one thread at a time (the engine loop); the backend
// may parallelise each call internally.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/kv_format_check.h"
#include "kernels/common/attention_args.h"
#include "kernels/common/dtype.h"
#include "kernels/common/moe_args.h"

namespace loom {

// A tensor of the checkpoint, used in place: [rows, cols] row-major (1-D tensors: rows = 1).
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
};

// A linear layer's weight [out_features, in_features] and optional f32 bias [out_features].
struct LinearWeight {
  WeightView weight;
  const float* bias = nullptr;

  int64_t out_features() const { return weight.rows; }
  int64_t in_features() const { return weight.cols; }
};

// One expert of a sparse layer: a SiLU-gated MLP, down(silu(gate(x)) * up(x)).
struct ExpertWeights {
  LinearWeight gate;  // [expert_intermediate, hidden]
  LinearWeight up;    // [expert_intermediate, hidden]
  LinearWeight down;  // [hidden, expert_intermediate]
};

// A sparse layer's experts as the backend reaches them from inside its kernels (the slot table of
// shared/ARCHITECTURE.md §4): made once by Ops::CreateExpertTable, read by MoeGroupedExperts.
// On CUDA it is device memory holding every expert's weight pointers, so the kernels pick each
// expert's weights from the routing they find on the device, and a step that uses it needs
// nothing from the host mid-way: it can be captured and replayed as a graph.
class ExpertTable {
 public:
  virtual ~ExpertTable() = default;
};

// One call's worth of a sparse layer's routed experts, every expert at once. The rows are the
// routing's grouped rows (kernels/common/moe_args.h): x holds the layer input of grouped row r
// (the token grouped_tokens[r]), and the rows of expert e are [expert_offsets[e],
// expert_offsets[e + 1]), read from wherever MoeRoute wrote them (device memory on CUDA).
struct MoeGroupedArgs {
  const ExpertTable* table = nullptr;
  int32_t num_tokens = 0;                // the step's tokens: the most rows one expert has
  int32_t num_rows = 0;                  // tokens x top_k: every grouped row
  const int32_t* expert_offsets = nullptr;  // [num_experts + 1]
  const float* x = nullptr;              // [num_rows, hidden]
  float* gate = nullptr;                 // [num_rows, expert_intermediate] scratch
  float* up = nullptr;                   // [num_rows, expert_intermediate] scratch
  float* out = nullptr;                  // [num_rows, hidden]: down(silu(gate(x)) * up(x))
};

// One product of a Linear call: out[r, :] = x[r, :] . weight^T (+ bias).
struct LinearOutput {
  const LinearWeight* weight = nullptr;
  float* out = nullptr;
  int64_t out_stride = 0;
};

// The largest work one step will ask of the ops, known at start-up. A backend that cannot
// allocate on the step path (CUDA) sizes its workspace from it; others may ignore it.
struct OpsLimits {
  int32_t max_num_tokens = 0;   // rows of every per-token op
  int64_t max_in_features = 0;  // widest Linear input
  int32_t max_num_seqs = 0;     // sequences in one attention call
  int32_t num_heads = 0;
  int32_t head_dim = 0;
  int32_t max_seq_len = 0;      // longest sequence the KV cache serves
  int32_t moe_num_experts = 0;  // a mixture-of-experts model's experts per layer (0: dense)
  int32_t moe_top_k = 0;        // and the experts each token picks
};

class Ops {
 public:
  virtual ~Ops() = default;

  // Prepares for steps within `limits` (workspace, library handles). Called once before the
  // first op; a call that does not fit the limits afterwards is a programming error.
  virtual absl::Status Reserve(const OpsLimits& limits) {
    (void)limits;
    return absl::OkStatus();
  }

  // Whether Linear and Embedding run weights stored in `dtype`. The loader refuses a model with a
  // matrix in a format its backend does not run (a combination without a kernel never runs).
  virtual bool SupportsWeightFormat(DType dtype) const { return IsFloatDType(dtype); }

  // Where the codes of a low-bit KV cache sit for this backend's kernels
  // (kernels/common/kv_format.h): part of the pool's format, so pools of different backends are
  // not byte-compatible for KV transfers.
  virtual KvCodeOrder PackedKvCodeOrder() const { return KvCodeOrder::kRows; }

  // OK when WriteKv and PagedAttention run a cache of `format`; otherwise an error naming the
  // combination (format, granularity, head_dim, block size, GQA group) that has no kernel. The
  // loader calls it before allocating the cache, so such a combination is refused at start.
  virtual absl::Status CheckKvFormat(const KvFormatSpec& format) const {
    return IsFloatDType(format.dtype) ? absl::OkStatus()
                                      : UnsupportedKvFormat(format, "this backend");
  }

  // out[t, :] = table[token_ids[t], :].  table: [vocab, dim]; out: [num_tokens, dim].
  virtual void Embedding(const int32_t* token_ids, int32_t num_tokens, const WeightView& table,
                         float* out) = 0;

  // out[r, :] = x[r, :] / rms(x[r, :]) * weight; x, out: [num_rows, dim]. out may alias x.
  virtual void RmsNorm(const float* x, int64_t x_stride, int32_t num_rows, int32_t dim,
                       const WeightView& weight, float eps, float* out, int64_t out_stride) = 0;

  // residual += delta; out = RmsNorm(residual). All [num_rows, dim], contiguous.
  virtual void AddRmsNorm(float* residual, const float* delta, int32_t num_rows, int32_t dim,
                          const WeightView& weight, float eps, float* out) = 0;

  // residual += delta, [num_rows, dim] contiguous.
  virtual void Add(float* residual, const float* delta, int64_t num_elements) = 0;

  // Every output shares the input x: [num_rows, in_features].
  virtual void Linear(const float* x, int64_t x_stride, int32_t num_rows,
                      std::span<const LinearOutput> outputs) = 0;

  // Rotary embedding in place on x: [num_tokens, num_heads, head_dim]; cos, sin:
  // [num_tokens, head_dim / 2] (kernels/ref/ops_ref.h states the formula).
  virtual void Rope(float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads,
                    int32_t head_dim, const float* cos, const float* sin) = 0;

  // out = silu(gate) * up, [num_rows, dim]; out may alias gate.
  virtual void SiluMul(const float* gate, const float* up, int32_t num_rows, int32_t dim,
                       float* out) = 0;

  // In place on `num_rows` contiguous rows of `dim` floats, dim a power of two:
  // x <- H x / sqrt(dim) (kernels/ref/ops_ref.h HadamardRotate).
  virtual void HadamardRotate(float* x, int64_t num_rows, int32_t dim) = 0;

  virtual void WriteKv(const KvWriteArgs& args) = 0;
  virtual void PagedAttention(const PagedAttentionArgs& args) = 0;

  // ---- Mixture-of-experts layers (kernels/common/moe_args.h; engine/layers/moe_block.h) ----
  // A backend that does not run them keeps these defaults: SupportsMoe() false, which makes the
  // loader refuse MoE models with Unimplemented, and op bodies that abort if reached anyway.

  // Whether the ops below run here.
  virtual bool SupportsMoe() const { return false; }

  // Softmax over each token's router logits, its top_k experts (renormalized when asked), and
  // the grouping of the (token, slot) pairs by expert. Before it returns, it also writes the
  // expert offsets to args.host_expert_offsets (host memory): the MoE block sizes each expert's
  // matmul from them. A backend whose memory is not the host's synchronizes here, so a step of
  // a mixture-of-experts model is not captured as a graph, and when MoeRoute returns every op
  // queued before it has finished (the expert cache relies on it to unpin the earlier layers'
  // experts, engine/experts/stored_experts.h).
  virtual void MoeRoute(const MoeRouteArgs& args);

  // out[r, :] = x[rows[r], :], out: [num_rows, dim] contiguous.
  virtual void GatherRows(const float* x, int64_t x_stride, const int32_t* rows,
                          int32_t num_rows, int32_t dim, float* out);

  // out[t, :] = sigmoid(gate_logits[t]) * shared[t, :], or 0 without a shared expert
  // (shared == nullptr); [num_tokens, dim] contiguous, out may alias shared.
  virtual void MoeInitOutput(const float* shared, const float* gate_logits, int32_t num_tokens,
                             int32_t dim, float* out);

  // out[tokens[r], :] += weights[r] * rows[r, :]: one expert's weighted output rows, whose
  // tokens are distinct. rows: [num_rows, dim]; out: [num_tokens, dim], contiguous.
  virtual void MoeScatterAdd(const float* rows, int32_t num_rows, int32_t dim,
                             const int32_t* tokens, const float* weights, float* out);

  // ---- Grouped experts: a sparse layer's routed experts without the routing on the host ----
  // A sparse block of at most MaxGroupedExpertTokens() tokens may run as: MoeRoute with
  // host_expert_offsets null (nothing waits for the device), GatherRows of every grouped row,
  // MoeGroupedExperts, MoeCombine. A backend without it keeps these defaults (0 tokens).

  // The most tokens one MoeGroupedExperts call serves (0: none).
  virtual int32_t MaxGroupedExpertTokens() const { return 0; }

  // The table of one sparse layer's experts ([num_experts], in expert order), made at load, never
  // on the step path. InvalidArgument or Unimplemented where this backend cannot run those
  // experts grouped (biases, mixed formats, a format without a kernel); the block then routes on
  // the host as before. The experts' weights must outlive the table.
  virtual absl::StatusOr<std::unique_ptr<ExpertTable>> CreateExpertTable(
      std::span<const ExpertWeights> experts);

  // Points `table` at other weights of the same experts (same formats and shapes: an expert
  // cache's slots, or the experts' homes), for the ops queued after this call; on CUDA the new
  // pointers are copied in stream order. The caller changes a table only once the steps queued
  // with its previous contents no longer need those weights kept where they were.
  virtual void UpdateExpertTable(ExpertTable& table, std::span<const ExpertWeights> experts);

  // args.out = every grouped row through its expert's MLP (MoeGroupedArgs).
  virtual void MoeGroupedExperts(const MoeGroupedArgs& args);

  // out[t, :] += weights[r] * rows[r, :] over the top_k grouped rows r = token_rows[t, k] of each
  // token, in ascending r (ascending expert: the order MoeScatterAdd expert by expert adds them).
  // rows: [num_tokens * top_k, dim]; out: [num_tokens, dim].
  virtual void MoeCombine(const float* rows, int32_t num_tokens, int32_t top_k, int32_t dim,
                          const int32_t* token_rows, const float* weights, float* out);
};

}  // namespace loom
