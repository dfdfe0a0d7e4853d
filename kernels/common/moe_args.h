// Arguments of the mixture-of-experts routing kernel, shared by every implementation (kernels/ref,
// kernels/cpu).
//
// A step's T tokens each pick top_k of E experts. Routing writes, per token, the chosen experts and
// their weights, and a grouping of the T x top_k (token, slot) pairs by expert: the "grouped rows"
// of expert e are [expert_offsets[e], expert_offsets[e + 1]), in token order; grouped_tokens[r] is
// the token of grouped row r and grouped_weights[r] its routing weight. A token picks an expert at
// most once, so one expert's rows name distinct tokens.
#pragma once

#include <cstdint>

namespace loom {

// Most experts a layer may have (the kernels keep one token's probabilities on the stack).
inline constexpr int32_t kMaxMoeExperts = 4096;

struct MoeRouteArgs {
  const float* logits = nullptr;  // [num_tokens, num_experts], row stride logits_stride
  int64_t logits_stride = 0;
  int32_t num_tokens = 0;
  int32_t num_experts = 0;  // at most kMaxMoeExperts
  int32_t top_k = 0;        // 1 <= top_k <= num_experts
  // Divide the top_k probabilities by their sum (Mixtral always; Qwen by norm_topk_prob).
  bool renormalize = false;
  int32_t* expert_ids = nullptr;      // [num_tokens, top_k] out, most probable first
  float* expert_weights = nullptr;    // [num_tokens, top_k] out
  int32_t* expert_offsets = nullptr;  // [num_experts + 1] out
  // [num_experts + 1] out, a copy of expert_offsets in host memory (Ops::MoeRoute; the kernels of
  // kernels/ref and kernels/cpu leave it alone). May be expert_offsets itself on the CPU.
  int32_t* host_expert_offsets = nullptr;
  int32_t* grouped_tokens = nullptr;  // [num_tokens * top_k] out
  float* grouped_weights = nullptr;   // [num_tokens * top_k] out
  // [num_tokens, top_k] out when not null: the grouped row of each (token, slot) pair (the inverse
  // of grouped_tokens, for Ops::MoeCombine).
  int32_t* token_rows = nullptr;
};

}  // namespace loom
