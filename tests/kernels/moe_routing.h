// The routing buffers of the MoE kernel tests (host vectors, or device arrays through
// RouteBuffers) and the MoeRouteArgs that point at them.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/moe_args.h"

namespace loom::moe_test {

// Where one routing of num_tokens x top_k pairs over num_experts goes.
struct RouteBuffers {
  int32_t* ids = nullptr;         // [T * K]
  float* weights = nullptr;       // [T * K]
  int32_t* offsets = nullptr;     // [E + 1]
  int32_t* tokens = nullptr;      // [T * K]
  float* grouped = nullptr;       // [T * K]
  int32_t* token_rows = nullptr;  // [T * K], may be null
};

inline MoeRouteArgs RouteArgs(const float* logits, int32_t num_tokens, int32_t num_experts,
                              int32_t top_k, bool renormalize, const RouteBuffers& b) {
  MoeRouteArgs a;
  a.logits = logits;
  a.logits_stride = num_experts;
  a.num_tokens = num_tokens;
  a.num_experts = num_experts;
  a.top_k = top_k;
  a.renormalize = renormalize;
  a.expert_ids = b.ids;
  a.expert_weights = b.weights;
  a.expert_offsets = b.offsets;
  a.grouped_tokens = b.tokens;
  a.grouped_weights = b.grouped;
  a.token_rows = b.token_rows;
  return a;
}

// Host buffers for a routing.
struct HostRouting {
  HostRouting(int32_t num_tokens, int32_t num_experts, int32_t top_k)
      : ids(size_t(num_tokens) * top_k),
        offsets(size_t(num_experts) + 1),
        tokens(ids.size()),
        token_rows(ids.size()),
        weights(ids.size()),
        grouped(ids.size()) {}
  RouteBuffers buffers() {
    return {ids.data(),    weights.data(), offsets.data(),
            tokens.data(), grouped.data(), token_rows.data()};
  }
  std::vector<int32_t> ids, offsets, tokens, token_rows;
  std::vector<float> weights, grouped;
};

}  // namespace loom::moe_test
