// The sparse feed-forward block of a mixture-of-experts layer (the other FFN variant beside
// MlpBlock; ModelConfig::IsSparseLayer picks it), written only in terms of backend Ops:
//
//   logits = normed . W_router^T                              [tokens, num_experts]
//   route:   softmax in f32, top_k experts per token (renormalized when norm_topk_prob), the
//            (token, slot) pairs grouped by expert             (Ops::MoeRoute)
//   delta  = sigmoid(normed . w_shared_gate^T) * shared_expert(normed), or 0 without one
//   for each expert e with routed tokens, in ascending order:
//            rows = normed[tokens of e];  y = down_e(silu(gate_e(rows)) * up_e(rows))
//            delta[token] += weight * y[row]                   (Ops::MoeScatterAdd)
//
// Experts are reached only through the ExpertProvider, and only those the step routes tokens to.
// Experts the provider would rather compute where they live (ExpertProvider::PrefersHost, when
// the model has host rows) are computed on the host CPU while the device runs the others: their
// gathered rows are queued to the host first, the loaded experts are queued next, then the host
// computes its experts (RunOnHost) and their rows go back. Every expert's output then waits at
// its grouped position until all are there, and the scatter-adds run in expert order, so the
// sums are the all-resident run's.
//
// Given the layer's ExpertTable (all experts resident; the step's tokens times K at most T and
// its tokens at most Ops::MaxGroupedExpertTokens), the block instead gathers every grouped row,
// runs all experts in one Ops::MoeGroupedExperts and adds each token's rows in expert order
// (Ops::MoeCombine): nothing waits for the routing on the host, so the step may be a graph.
// Otherwise it reads the routing's per-expert row counts on the host (Ops::MoeRoute copies them
// there). A token's sum has the same terms in the same order whatever else is in the batch, so
// batching changes only the matmuls' summation order (as for dense layers).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/backend/backend.h"
#include "engine/backend/ops.h"
#include "engine/experts/expert_provider.h"
#include "engine/layers/decoder_layer.h"
#include "engine/models/model_config.h"
#include "engine/models/moe_weights.h"

namespace loom {

// Scratch of the sparse block, sized for the step's token budget (T) and the model's num_experts
// (E) and num_experts_per_tok (K).
struct MoeScratch {
  float* router_logits = nullptr;       // [T, E]
  float* expert_weights = nullptr;      // [T, K]
  int32_t* expert_offsets = nullptr;    // [E + 1]
  int32_t* host_expert_offsets = nullptr;  // [E + 1], host memory (Ops::MoeRoute)
  int32_t* grouped_tokens = nullptr;    // [T * K]
  int32_t* token_rows = nullptr;        // [T * K]
  float* grouped_weights = nullptr;     // [T * K]
  float* gathered = nullptr;            // [T, hidden]
  float* expert_out = nullptr;          // [T, hidden]
  float* shared_gate_logits = nullptr;  // [T]
  // [T * K, hidden]: every expert's rows at their grouped positions, when some are computed on
  // the host; null when the provider computes none there.
  float* host_rows = nullptr;
};

// normed: [num_tokens, hidden] -> delta: [num_tokens, hidden]. The token rows' chosen experts go to
// expert_ids ([num_tokens, K], most probable first). scratch.gate and scratch.up hold [num_tokens,
// max(expert, shared expert intermediate size)]. Fails only when the provider cannot produce an
// expert. `backend` (whose ops `ops` are) copies rows to and from the host for experts computed
// there. `table` (may be null) is the layer's experts for Ops::MoeGroupedExperts, passed only for
// steps it serves.
absl::Status MoeBlock(Backend& backend, Ops& ops, const ModelConfig& config,
                      const MoeLayerWeights& weights, int32_t layer, ExpertProvider& experts,
                      const ExpertTable* table, int32_t num_tokens, const float* normed,
                      const LayerScratch& scratch, const MoeScratch& moe, int32_t* expert_ids,
                      float* delta);

}  // namespace loom
