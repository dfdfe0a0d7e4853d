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

absl::Status MoeBlock(Backend& backend, Ops& ops, const ModelConfig& c, const MoeLayerWeights& w, int32_t layer,
                      ExpertProvider& experts, int32_t num_tokens, const float* normed,
                      const LayerScratch& s, const MoeScratch& m, int32_t* expert_ids,
                      float* delta) {
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
  route.host_expert_offsets = m.host_expert_offsets;
  route.grouped_tokens = m.grouped_tokens;
  route.grouped_weights = m.grouped_weights;
  ops.MoeRoute(route);

  if (c.moe.shared_expert_intermediate_size > 0) {
    SharedExpert(ops, c, w, num_tokens, normed, s, m, delta);
  } else {
    ops.MoeInitOutput(nullptr, nullptr, num_tokens, hidden, delta);
  }
  const int32_t inter = c.moe.expert_intermediate_size;
  const int32_t* offsets = m.host_expert_offsets;
  // The experts with tokens, and which of them are computed on the host.
  int32_t used[kMaxMoeExperts];
  bool on_host[kMaxMoeExperts];
  int32_t num_used = 0, num_loaded = 0;
  for (int32_t e = 0; e < num_experts && num_used < kMaxMoeExperts; ++e) {
    const int32_t rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    on_host[e] = experts.PrefersHost(layer, e, rows);
    if (!on_host[e]) used[num_loaded++] = e;
    ++num_used;
  }
  experts.WillUse(layer, std::span<const int32_t>(used, static_cast<size_t>(num_loaded)));
  for (int32_t e = 0; e < num_experts; ++e) {
    const int32_t first = offsets[e];
    const int32_t rows = offsets[e + 1] - first;
    if (rows == 0) continue;
    ops.GatherRows(normed, hidden, m.grouped_tokens + first, rows, hidden, m.gathered);
    const int64_t bytes = int64_t{rows} * hidden * static_cast<int64_t>(sizeof(float));
    if (on_host[e]) {
      const ExpertProvider::HostRows host = experts.host_rows();
      backend.CopyToHost(host.x, m.gathered, bytes);  // waits for the gather
      LOOM_RETURN_IF_ERROR(experts.RunOnHost(layer, e, rows));
      // host.out is reused only after the next CopyToHost, which waits for this copy.
      backend.CopyToDevice(m.expert_out, host.out, bytes);
      ops.MoeScatterAdd(m.expert_out, rows, hidden, m.grouped_tokens + first,
                        m.grouped_weights + first, delta);
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(const ExpertWeights* expert, experts.Get(layer, e));
    const LinearOutput gate_up[] = {{&expert->gate, s.gate, inter}, {&expert->up, s.up, inter}};
    ops.Linear(m.gathered, hidden, rows, gate_up);
    ops.SiluMul(s.gate, s.up, rows, inter, s.gate);
    const LinearOutput down[] = {{&expert->down, m.expert_out, hidden}};
    ops.Linear(s.gate, inter, rows, down);
    ops.MoeScatterAdd(m.expert_out, rows, hidden, m.grouped_tokens + first,
                      m.grouped_weights + first, delta);
    experts.Done(layer, e);
  }
  return absl::OkStatus();
}

}  // namespace loom
