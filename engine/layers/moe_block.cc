#include "engine/layers/moe_block.h"

#include "engine/common/status.h"

namespace loom {
namespace {

// delta = sigmoid(gate logit) * shared_expert(normed).
void SharedExpert(Ops& ops, const ModelConfig& c, const MoeLayerWeights& w, int32_t num_tokens,
                  const float* normed, const LayerScratch& s, const MoeScratch& m, float* delta) {
  const int32_t inter = c.moe.shared_expert_intermediate_size;
  const LinearOutput gate_up[] = {{&w.shared_gate_proj, s.gate, inter},
                                  {&w.shared_up_proj, s.up, inter},
                                  {&w.shared_expert_gate, m.shared_gate_logits, 1}};
  ops.Linear(normed, c.hidden_size, num_tokens, gate_up);
  ops.SiluMul(s.gate, s.up, num_tokens, inter, s.gate);
  const LinearOutput down[] = {{&w.shared_down_proj, delta, c.hidden_size}};
  ops.Linear(s.gate, inter, num_tokens, down);
  ops.MoeInitOutput(delta, m.shared_gate_logits, num_tokens, c.hidden_size, delta);
}

}  // namespace

absl::Status MoeBlock(Backend& backend, Ops& ops, const ModelConfig& c, const MoeLayerWeights& w,
                      int32_t layer, ExpertProvider& experts, const ExpertTable* table,
                      int32_t num_tokens, const float* normed, const LayerScratch& s,
                      const MoeScratch& m, int32_t* expert_ids, float* delta) {
  const int32_t num_experts = c.moe.num_experts;
  const int32_t hidden = c.hidden_size;
  const LinearOutput router[] = {{&w.router, m.router_logits, num_experts}};
  ops.Linear(normed, hidden, num_tokens, router);
  MoeRouteArgs route;
  route.logits = m.router_logits;
  route.logits_stride = num_experts;
  route.num_tokens = num_tokens;
  route.num_experts = num_experts;
  route.top_k = c.moe.num_experts_per_tok;
  route.renormalize = c.moe.norm_topk_prob;
  route.expert_ids = expert_ids;
  route.expert_weights = m.expert_weights;
  route.expert_offsets = m.expert_offsets;
  route.host_expert_offsets = table != nullptr ? nullptr : m.host_expert_offsets;
  route.grouped_tokens = m.grouped_tokens;
  route.grouped_weights = m.grouped_weights;
  route.token_rows = table != nullptr ? m.token_rows : nullptr;
  ops.MoeRoute(route);

  if (c.moe.shared_expert_intermediate_size > 0) {
    SharedExpert(ops, c, w, num_tokens, normed, s, m, delta);
  } else {
    ops.MoeInitOutput(nullptr, nullptr, num_tokens, hidden, delta);
  }
  if (table != nullptr) {
    const int32_t pairs = num_tokens * route.top_k;
    ops.GatherRows(normed, hidden, m.grouped_tokens, pairs, hidden, m.gathered);
    MoeGroupedArgs grouped;
    grouped.table = table;
    grouped.num_tokens = num_tokens;
    grouped.num_rows = pairs;
    grouped.expert_offsets = m.expert_offsets;
    grouped.x = m.gathered;
    grouped.gate = s.gate;
    grouped.up = s.up;
    grouped.out = m.expert_out;
    ops.MoeGroupedExperts(grouped);
    ops.MoeCombine(m.expert_out, num_tokens, route.top_k, hidden, m.token_rows,
                   m.grouped_weights, delta);
    return absl::OkStatus();
  }
  const int32_t inter = c.moe.expert_intermediate_size;
  const int32_t* offsets = m.host_expert_offsets;
  const int64_t row_bytes = int64_t{hidden} * static_cast<int64_t>(sizeof(float));
  // The experts with tokens, and which of them are computed on the host.
  int32_t loaded[kMaxMoeExperts], hosted[kMaxMoeExperts];
  int32_t num_loaded = 0, num_hosted = 0;
  for (int32_t e = 0; e < num_experts; ++e) {
    const int32_t rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    if (m.host_rows != nullptr && experts.PrefersHost(layer, e, rows)) {
      hosted[num_hosted++] = e;
    } else {
      loaded[num_loaded++] = e;
    }
  }
  // With experts on the host, every expert's output rows stay at their grouped positions in
  // m.host_rows until all are there, and are added in expert order at the end (as the
  // all-resident run adds them). The hosted experts' rows leave first, so that the host computes
  // them while the device runs the loaded experts.
  const ExpertProvider::HostRows host = experts.host_rows();
  for (int32_t i = 0; i < num_hosted; ++i) {
    const int32_t e = hosted[i];
    const int32_t first = offsets[e];
    const int32_t rows = offsets[e + 1] - first;
    ops.GatherRows(normed, hidden, m.grouped_tokens + first, rows, hidden,
                   m.host_rows + int64_t{first} * hidden);
    backend.CopyToHostAsync(host.x + int64_t{first} * hidden,
                            m.host_rows + int64_t{first} * hidden, rows * row_bytes);
  }

  experts.WillUse(layer, std::span<const int32_t>(loaded, static_cast<size_t>(num_loaded)));
  for (int32_t i = 0; i < num_loaded; ++i) {
    const int32_t e = loaded[i];
    const int32_t first = offsets[e];
    const int32_t rows = offsets[e + 1] - first;
    LOOM_ASSIGN_OR_RETURN(const ExpertWeights* expert, experts.Get(layer, e));
    ops.GatherRows(normed, hidden, m.grouped_tokens + first, rows, hidden, m.gathered);
    const LinearOutput gate_up[] = {{&expert->gate, s.gate, inter}, {&expert->up, s.up, inter}};
    ops.Linear(m.gathered, hidden, rows, gate_up);
    ops.SiluMul(s.gate, s.up, rows, inter, s.gate);
    float* out = num_hosted > 0 ? m.host_rows + int64_t{first} * hidden : m.expert_out;
    const LinearOutput down[] = {{&expert->down, out, hidden}};
    ops.Linear(s.gate, inter, rows, down);
    if (num_hosted == 0) {
      ops.MoeScatterAdd(out, rows, hidden, m.grouped_tokens + first, m.grouped_weights + first,
                        delta);
    }
    experts.Done(layer, e);
  }
  if (num_hosted == 0) return absl::OkStatus();

  // The host's part, while the device computes what is queued; its rows then go back (host.out
  // is written again only after the next layer's wait, which comes after these copies).
  LOOM_RETURN_IF_ERROR(backend.WaitForHostCopies());
  for (int32_t i = 0; i < num_hosted; ++i) {
    const int32_t e = hosted[i];
    const int32_t first = offsets[e];
    const int32_t rows = offsets[e + 1] - first;
    LOOM_RETURN_IF_ERROR(experts.RunOnHost(layer, e, first, rows));
    backend.CopyToDevice(m.host_rows + int64_t{first} * hidden,
                         host.out + int64_t{first} * hidden, rows * row_bytes);
  }
  for (int32_t e = 0; e < num_experts; ++e) {
    const int32_t first = offsets[e];
    const int32_t rows = offsets[e + 1] - first;
    if (rows == 0) continue;
    ops.MoeScatterAdd(m.host_rows + int64_t{first} * hidden, rows, hidden,
                      m.grouped_tokens + first, m.grouped_weights + first, delta);
  }
  return absl::OkStatus();
}

}  // namespace loom
