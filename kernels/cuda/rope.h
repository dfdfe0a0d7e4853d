// CUDA rotary position embedding, "rotate half" layout (Hugging Face Llama checkpoints), in place.
//
//   for each token t, head h and i < half = rotary_dim / 2, with c = cos[t, i], s = sin[t, i]:
//     x'[t, h, i]        = x[t, h, i] * c - x[t, h, i + half] * s
//     x'[t, h, i + half] = x[t, h, i + half] * c + x[t, h, i] * s
//   x:        [num_tokens, num_heads, head_dim] f32, row (token) stride x_stride elements; the
//             dimensions from 2 * half to head_dim are left alone
//   cos, sin: [num_tokens, half] f32, rows contiguous (the angles of each token's position)
//
// Work split: one block per token (blocks loop over tokens past 65536) of up to 256 threads; a
// thread owns N consecutive rotation pairs (i .. i + N, and their partners at + half) of one
// head, N = 4, 2 or 1: the widest that half, head_dim, x_stride and the pointers' alignment
// allow. cos/sin rows are re-read per head from L1. The products may be fused (FMA), so results
// differ from ref::Rope by about one ulp of the products.
// Bytes moved per token: 8 * num_heads * rotary_dim (read and write the rotated part of x) plus
// 8 * half (cos and sin).
//
// Plain C++ header: the launcher takes device pointers and a stream, queues the kernel and
// returns the launch error; it never allocates or synchronises.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace loom::cuda {

// Returns cudaErrorInvalidValue for negative sizes or rotary_dim > head_dim; cudaSuccess without
// a launch when there is nothing to rotate.
cudaError_t Rope(float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads,
                 int32_t head_dim, int32_t rotary_dim, const float* cos, const float* sin,
                 cudaStream_t stream);

}  // namespace loom::cuda
