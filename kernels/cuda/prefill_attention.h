// CUDA prefill attention on tensor cores: FlashAttention-2-style causal (optionally
// sliding-window) attention of every prefill chunk of a ragged batch over its sequence's paged
// KV cache, with GQA. Contract and cache layout as in kernels/common/attention_args.h and
// ref::PagedAttention; only sequences with two or more query rows are served (decode rows are
// left to cuda::PagedAttention).
//
//   for sequence s with q_len = query_start[s + 1] - query_start[s] >= 2, its row t at position
//   p = seq_lens[s] - (query_start[s + 1] - t), head h, kv_head = h / (num_heads / num_kv_heads):
//     score[j] = scale * q[t, h, :] . K[s, j, kv_head, :]     for j in [first(p), p]
//     out[t, h, :] = sum_j softmax(score)[j] * V[s, j, kv_head, :]
//   first(p) = 0, or max(0, p - sliding_window + 1) when a window is set.
//
// So a chunk of a chunked prefill attends to every cached key before it and causally within
// itself. Work split: one CTA of 4 warps per (64-row query tile of a sequence, head); each warp
// owns 16 query rows and walks the CTA's key tiles (64 keys, 32 for head_dim 256) from the
// diagonal backwards, with an online softmax. Details (fragment layouts, shared memory, bytes
// and FLOPs) at the top of prefill_attention.cu.
//
// Accuracy: q * scale is rounded to the cache's 16-bit type, and so are the softmax
// probabilities before they multiply V (sums and the output stay f32), so results differ from
// ref::PagedAttention by about 2^-8 (bf16) or 2^-11 (f16) relative to the output scale.
//
// Plain C++ header: the launcher takes device pointers (q, out, cache.k/v, query_start,
// seq_lens, block_tables) and a stream, queues the kernel and returns the launch error; it never
// allocates or synchronises. Any thread may call it.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/attention_args.h"

namespace loom::cuda {

// True when PrefillAttention can serve `args`: a bf16 or f16 cache with 16-byte aligned k and v,
// head_dim in {64, 80, 96, 128, 256}, block_size >= 1, num_heads >= 1 a multiple of
// num_kv_heads, num_seqs, max_blocks_per_seq and sliding_window >= 0. Looks at sizes and
// pointer values only (never dereferences them), so it needs no device.
bool PrefillAttentionSupports(const PagedAttentionArgs& args);

// Attention for every sequence with two or more query rows; the output rows of sequences with 0
// or 1 query rows are left untouched. `max_query_len` is an upper bound, known on the host, of
// every sequence's query length; it sizes the grid only, which covers the batch in one pass when
// it also bounds the token count (the engine passes the step's num_tokens). Returns
// cudaErrorInvalidValue for unsupported args (see PrefillAttentionSupports) or a negative
// max_query_len; cudaSuccess without a launch when there is nothing to do (no sequence, or
// max_query_len < 2); otherwise the launch error.
cudaError_t PrefillAttention(const PagedAttentionArgs& args, int32_t max_query_len,
                             cudaStream_t stream);

}  // namespace loom::cuda
