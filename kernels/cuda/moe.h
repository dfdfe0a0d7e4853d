// CUDA kernels of the mixture-of-experts ops that move activation rows (kernels/ref/moe_ref.h
// states the same operations; engine/layers/moe_block.h the block that runs them):
//
//   GatherRows:     out[r, :] = x[rows[r], :]
//   MoeInitOutput:  out[t, :] = sigmoid(gate_logits[t]) * shared[t, :], or 0 without shared
//   MoeScatterAdd:  out[tokens[r], :] += weights[r] * rows[r, :]   (the tokens distinct)
//   MoeCombine:     out[t, :] += weights[r] * rows[r, :] over r = token_rows[t, :], ascending r
//   MoeRoute:       softmax, top-k and grouping by expert (kernels/common/moe_args.h)
//
// Routing on the device serves the grouped experts (Ops::MoeGroupedExperts), whose steps must not
// wait for the host; the expert-by-expert path routes on the host with ref::MoeRoute
// (engine/backend/cuda/cuda_ops.h says why). The device routing computes the same formula with
// expf and a warp-order sum (probabilities within a few ulp of ref's), and breaks ties between
// equal probabilities by the lower expert id where ref follows libstdc++'s selection order. One
// warp per token: top_k rounds over the token's logits, each taking the best (probability,
// expert) after the previous pick. The grouping is one block, one thread per expert: its count,
// a scan, then its rows in token order (a counting sort, as ref::MoeGroup).
// MoeCombine: one block per token; its top_k rows sorted by one thread, then each element summed
// over them in ascending row with fmaf, so it equals MoeScatterAdd called expert by expert.
//
// Work split: one block per output row (blocks loop over rows past 65536), up to 256 threads
// walking the row in vectors of 4, 2 or 1 floats. Each output element is written by one thread
// with the reference's arithmetic: the gather copies; the scatter is one fused multiply-add per
// element (fmaf; ref rounds the product first unless its compiler contracts it), the sigmoid
// expf and an IEEE division. So results equal ref's to an ulp per element.
// Bytes moved: 8 * num_rows * dim for the gather and the init, 12 * num_rows * dim for the scatter.
//
// Plain C++ header: each launcher takes device pointers and a stream, queues the kernel and
// returns the launch error; none allocates or synchronises. cudaErrorInvalidValue for negative
// sizes; cudaSuccess without a launch when there is nothing to do.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/moe_args.h"

namespace loom::cuda {

// Routes args.num_tokens tokens on the device: writes expert_ids, expert_weights,
// expert_offsets, grouped_tokens, grouped_weights and (when not null) token_rows; ignores
// host_expert_offsets. cudaErrorInvalidValue for sizes outside moe_args.h's bounds.
cudaError_t MoeRoute(const MoeRouteArgs& args, cudaStream_t stream);

// rows: [num_tokens * top_k, dim]; token_rows: [num_tokens, top_k]; out: [num_tokens, dim].
cudaError_t MoeCombine(const float* rows, int32_t num_tokens, int32_t top_k, int32_t dim,
                       const int32_t* token_rows, const float* weights, float* out,
                       cudaStream_t stream);

// x has row stride x_stride (elements); out is [num_rows, dim] contiguous.
cudaError_t GatherRows(const float* x, int64_t x_stride, const int32_t* rows, int32_t num_rows,
                       int32_t dim, float* out, cudaStream_t stream);

// shared and gate_logits may be null together (out = 0); out may alias shared.
cudaError_t MoeInitOutput(const float* shared, const float* gate_logits, int32_t num_tokens,
                          int32_t dim, float* out, cudaStream_t stream);

// rows: [num_rows, dim]; out: [*, dim], contiguous; tokens distinct.
cudaError_t MoeScatterAdd(const float* rows, int32_t num_rows, int32_t dim, const int32_t* tokens,
                          const float* weights, float* out, cudaStream_t stream);

}  // namespace loom::cuda
