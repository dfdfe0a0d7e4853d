// CUDA gated activation of the MLP: SiLU(gate) * up (Llama, Mistral, Qwen).
//
//   out[r, i] = silu(gate[r, i]) * up[r, i],   silu(g) = g / (1 + exp(-g))
//   gate, up, out: [num_rows, dim] f32 with row strides (elements); out may alias gate or up
//                  (same stride)
//
// Work split: one block per row (blocks loop over rows past 65536) of up to 256 threads; each
// thread walks the row in vectors of N = 4, 2 or 1 elements, the widest that dim, the strides and
// the pointers' alignment allow. expf and the division are the IEEE-accurate forms (no fast
// math), so results are within a few ulp of ref::SiluMul.
// Bytes moved: 12 * num_rows * dim (read gate and up, write out).
//
// Plain C++ header: the launcher takes device pointers and a stream, queues the kernel and
// returns the launch error; it never allocates or synchronises.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace loom::cuda {

// Returns cudaErrorInvalidValue for negative sizes; cudaSuccess without a launch when num_rows
// or dim is 0.
cudaError_t SiluMul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                    int32_t num_rows, int32_t dim, float* out, int64_t out_stride,
                    cudaStream_t stream);

}  // namespace loom::cuda
