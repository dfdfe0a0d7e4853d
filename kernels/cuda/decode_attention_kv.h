// CUDA split-KV decode attention over compressed KV caches: fp8 E4M3 elements and the low-bit
// packed formats (int8 / int4 / int2 codes with f16 scales and zeros, K per channel or per token,
// plus each sequence's bf16 residual tail; kernels/common/kv_format.h). The same math, split plan,
// workspace and output contract as cuda::DecodeAttention (decode_attention.h), which serves the
// bf16 / f16 caches:
//
//   for sequence s with one query row t = query_start[s] at position p = seq_lens[s] - 1, head h,
//   kv_head = h / group:
//     score[j] = scale * q[t, h, :] . K[s, j, kv_head, :]     for j in [first(p), p]
//     out[t, h, :] = sum_j softmax(score)[j] * V[s, j, kv_head, :]
//   where K and V are read as ref::LoadKvElement reads them: full blocks (and every block of a
//   sequence whose tail_slots entry is -1) dequantized from their packed form, the sequence's
//   partial last block from its tail slot.
//
// One pass over the cache: each warp dequantizes a 16-key chunk of K and V (packed codes, tail
// rows or fp8 bytes, 32 elements per lane step) straight into a tensor-core tile in shared
// memory and runs the mma.m16n8k16 products of decode_attention.cu on it, the GQA group folded
// into the 16 rows of M. Design, work split and bytes moved: top of decode_attention_kv.cu.
//
// Accuracy: low-bit tiles are rounded to bf16 (exact for tail rows) and fp8 tiles converted to
// f16 (exact); q * scale * log2(e) and the softmax weights are rounded to that type. Against
// ref::PagedAttention over the same cache the largest difference stays within 1e-2 of the output
// scale for the low-bit formats and 2e-3 for fp8.
//
// Plain C++ header: the launcher takes device pointers and a stream, queues two kernels at most,
// returns the launch error and never allocates or synchronises.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/attention_args.h"

namespace loom::cuda {

// True when DecodeAttentionKv serves `args`: cache dtype fp8 E4M3 (any block_size >= 1) or a
// low-bit format (block_size 16, 32, 64 or 128), head_dim 64, 128 or 256, num_heads a positive
// multiple of num_kv_heads with a group of at most kDecodeAttentionMaxGroup, and the K and V
// regions (and the tails of a low-bit cache) 16-byte aligned. Looks at sizes and pointers only.
bool DecodeAttentionKvSupports(const PagedAttentionArgs& args);

// Attention for every sequence with exactly one query row, as cuda::DecodeAttention: the split
// count is DecodeAttentionNumSplits(...), the workspace needs DecodeAttentionWorkspaceBytes(...)
// bytes (or the exact need of this call; null with one split), rows of other sequences are left
// untouched. args.tail_slots (device, [num_seqs]) may be null: no sequence has a tail. Returns
// cudaErrorInvalidValue for unsupported arguments or a too-small workspace, a CUDA error from
// querying the device, or the launch error.
cudaError_t DecodeAttentionKv(const PagedAttentionArgs& args, int32_t max_seq_len,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace loom::cuda
