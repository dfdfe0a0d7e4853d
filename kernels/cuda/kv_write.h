// CUDA store of new K/V rows into the paged KV cache (layout in kernels/common/attention_args.h).
//
//   for each token t with slot = slot_mapping[t] >= 0, block = slot / block_size,
//   offset = slot % block_size, head h < num_kv_heads and d < head_dim:
//     cache.k[block, h, offset, d] = round(k[t, h * head_dim + d])   (likewise v)
//   k, v:         [num_tokens, num_kv_heads * head_dim] f32, row strides k_stride / v_stride
//   slot_mapping: [num_tokens] i32; a negative slot skips the row, and so does a slot at or past
//                 num_blocks * block_size (the cache is never written out of bounds)
//   cache.k/v:    [num_blocks, num_kv_heads, block_size, head_dim] of cache.dtype (f32, bf16 or
//                 f16), rounded to nearest even: bit-identical to ref::WriteKv
//
// Work split: one block per token (blocks loop over tokens past 65536) of up to 256 threads; a
// thread owns N consecutive d of one head and writes them to both K and V, N = 8, 4, 2 or 1: the
// widest that head_dim, the strides and the pointers' alignment allow (8 f32 in = two 16-byte
// loads per tensor; 8 bf16/f16 out = one 16-byte store).
// Bytes moved per written token: 2 * num_kv_heads * head_dim * (4 + sizeof(cache.dtype)) plus
// the 4-byte slot.
//
// Plain C++ header: the launcher takes device pointers (args.k, args.v, args.slot_mapping and
// args.cache.k/v all on the device) and a stream, queues the kernel and returns the launch
// error; it never allocates or synchronises.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/common/attention_args.h"

namespace loom::cuda {

// Returns cudaErrorInvalidValue for negative sizes, a block_size < 1 or a non-float cache dtype;
// cudaSuccess without a launch when there is nothing to write.
cudaError_t WriteKv(const KvWriteArgs& args, cudaStream_t stream);

}  // namespace loom::cuda
