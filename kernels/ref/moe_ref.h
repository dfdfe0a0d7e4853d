// Reference implementations of the mixture-of-experts ops (kernels/common/moe_args.h states the
// routing layout). A sparse block runs: route; per expert with rows: gather its tokens, the
// expert's MLP, scatter-add its weighted output rows; on an output that starts as the gated shared
// expert or zero (MoeInitOutput). Routing follows Hugging Face transformers' top-k routers exactly:
//
//   p = softmax(logits) in f32: e_i = exp(l_i - max l), p_i = e_i * (1 / sum e)
//   (ids, w) = the top_k largest p, largest first
//   if renormalize: w_k = w_k / sum w
//
// Ties are broken as torch.topk does on the CPU (which order equal probabilities end up in is that
// of libstdc++'s selection algorithms over (probability, index) pairs): k * 64 <= E takes
// std::partial_sort; otherwise std::nth_element to slot k - 1 and std::sort of the slots before it.
// tests/kernels/moe_test.cc checks cases recorded from torch. A NaN counts as larger than any
// number, as in torch.
#pragma once

#include <cstdint>

#include "kernels/common/moe_args.h"

namespace loom::ref {

// Routes one token: probabilities of `num_experts` logits, then ids and weights of its top_k.
void MoeRouteToken(const float* logits, int32_t num_experts, int32_t top_k, bool renormalize,
                   int32_t* expert_ids, float* expert_weights);

// Groups routed (token, slot) pairs by expert (counting sort, tokens in order within an expert).
// Reads args.expert_ids and expert_weights; writes expert_offsets, grouped_tokens and
// grouped_weights.
void MoeGroup(const MoeRouteArgs& args);

// MoeRouteToken for every token, then MoeGroup.
void MoeRoute(const MoeRouteArgs& args);

// out[r, :] = x[rows[r], :] for r < num_rows; x has row stride x_stride, out is contiguous.
void GatherRows(const float* x, int64_t x_stride, const int32_t* rows, int32_t num_rows,
                int32_t dim, float* out);

// out[t, :] = sigmoid(gate_logits[t]) * shared[t, :], or 0 when shared is null; all [num_tokens,
// dim] contiguous, out may alias shared.
void MoeInitOutput(const float* shared, const float* gate_logits, int32_t num_tokens, int32_t dim,
                   float* out);

// out[tokens[r], :] += weights[r] * rows[r, :] for r < num_rows; rows [num_rows, dim] and out
// contiguous. The tokens must be distinct (one expert's rows).
void MoeScatterAdd(const float* rows, int32_t num_rows, int32_t dim, const int32_t* tokens,
                   const float* weights, float* out);

// The top_k grouped rows of one token (token_rows[0, top_k)) in ascending order, into sorted.
void SortedTokenRows(const int32_t* token_rows, int32_t top_k, int32_t* sorted);

// out[t, :] += weights[r] * rows[r, :] for each token's grouped rows r = token_rows[t * top_k +
// k], in ascending r: the sum MoeScatterAdd expert by expert makes, in its order.
void MoeCombine(const float* rows, int32_t num_tokens, int32_t top_k, int32_t dim,
                const int32_t* token_rows, const float* weights, float* out);

}  // namespace loom::ref
