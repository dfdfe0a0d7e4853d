// CUDA kernels of the mixture-of-experts ops that move activation rows (kernels/ref/moe_ref.h
// states the same operations; engine/layers/moe_block.h the block that runs them):
//
//   GatherRows:     out[r, :] = x[rows[r], :]
//   MoeInitOutput:  out[t, :] = sigmoid(gate_logits[t]) * shared[t, :], or 0 without shared
//   MoeScatterAdd:  out[tokens[r], :] += weights[r] * rows[r, :]   (the tokens distinct)
//
// Routing itself (softmax, top-k, grouping by expert) is not here: the CUDA backend routes on the
// host with ref::MoeRoute (engine/backend/cuda/cuda_ops.h says why).
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

namespace loom::cuda {

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
