// CUDA store of new K/V rows into the paged KV cache, in every KV format (layouts in
// kernels/common/attention_args.h and kernels/common/kv_format.h).
//
// Element formats (f32, bf16, f16, fp8 E4M3):
//   for each token t with slot = slot_mapping[t] >= 0, block = slot / block_size,
//   offset = slot % block_size, head h < num_kv_heads and d < head_dim:
//     cache.k[block, h, offset, d] = round(k[t, h * head_dim + d])   (likewise v)
//   k, v:         [num_tokens, num_kv_heads * head_dim] f32, row strides k_stride / v_stride
//   slot_mapping: [num_tokens] i32; a negative slot skips the row, and so does a slot at or past
//                 num_blocks * block_size (the cache is never written out of bounds)
//   cache.k/v:    [num_blocks, num_kv_heads, block_size, head_dim] of cache.dtype, rounded to
//                 nearest even (fp8: saturating at +-448): bit-identical to ref::WriteKv
// Work split: one block per token (blocks loop over tokens past 65536) of up to 256 threads; a
// thread owns N consecutive d of one head and writes them to both K and V, N = 8, 4, 2 or 1: the
// widest that head_dim, the strides and the pointers' alignment allow (8 f32 in = two 16-byte
// loads per tensor; 8 bf16/f16 out = one 16-byte store).
// Bytes moved per written token: 2 * num_kv_heads * head_dim * (4 + sizeof(cache.dtype)) plus
// the 4-byte slot.
//
// Low-bit formats (int8, int4, int2), quantize on append, per sequence s of args.batch with a
// tail slot (tail_slots[s] >= 0; padding sequences are skipped), its new rows at positions
// [first, seq_len), first = seq_len - (query_start[s + 1] - query_start[s]):
//   every block b the step completes ((b + 1) * block_size <= seq_len) is packed from its rows,
//   each rounded to bf16 (rows before `first` come from the tail, already bf16), into the head
//   block of block slot_mapping[row of its last position] / block_size (a negative or
//   out-of-range block is skipped); the new rows of a block left partial go to the tail (bf16).
//   Codes, scales and zeros are bit-identical to ref::WriteKvLowBit (the quantizer's f32 steps
//   in kernels/cuda/kv_format_inl.cuh).
// Work split: one CTA of 256 threads per (sequence, KV head, K or V, y < gridDim.y); CTA y packs
// the completed blocks first_block + y, + gridDim.y, ... one after the other: the block's rows go
// to shared memory as bf16 (block_size * head_dim * 2 bytes, at most 64 KiB), one warp per group
// finds min and max and writes the scale and zero, then each thread builds whole code bytes.
// CTA y = 0 also writes the partial block's rows to the tail, after packing the first block
// (which may read tail rows the new ones replace), so no CTA reads what another writes.
// Bytes moved per written token: 2 * num_kv_heads * head_dim * 4 read; per packed head block
// block_size * row_bytes + 4 * num_params written plus the tail rows read; 2 * head_dim bytes per
// row written to a tail.
//
// Plain C++ header: the launcher takes device pointers (args.k, args.v, args.slot_mapping,
// args.cache.k/v, and for low-bit formats the tails and args.batch's arrays, all on the device)
// and a stream, queues the kernel and returns the launch error; it never allocates or
// synchronises.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/common/attention_args.h"

namespace loom::cuda {

// True when WriteKv serves a low-bit cache of these sizes: head_dim a multiple of 32 in
// [32, 256] and block_size 16, 32, 64 or 128.
bool WriteKvLowBitSupports(const PagedKvView& cache);

// Returns cudaErrorInvalidValue for negative sizes, a block_size < 1, a dtype that is not a KV
// cache format, a low-bit cache WriteKvLowBitSupports refuses or one without tails or batch
// arrays; cudaSuccess without a launch when there is nothing to write.
cudaError_t WriteKv(const KvWriteArgs& args, cudaStream_t stream);

}  // namespace loom::cuda
