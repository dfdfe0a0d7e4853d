// CUDA split-KV ("flash-decoding") attention for decode rows: every sequence of a ragged batch
// that has exactly one query row, over its paged KV cache, with the query heads of each GQA group
// folded onto the tensor cores so each K/V byte is read from memory once per group. Same math and
// layout as ref::PagedAttention (kernels/common/attention_args.h):
//
//   for sequence s with one query row t = query_start[s] at position p = seq_lens[s] - 1, head h,
//   kv_head = h / group (group = num_heads / num_kv_heads):
//     score[j] = scale * q[t, h, :] . K[s, j, kv_head, :]     for j in [first(p), p]
//     out[t, h, :] = sum_j softmax(score)[j] * V[s, j, kv_head, :]
//   first(p) = 0, or p - sliding_window + 1 when a window is set (never below 0).
//
// The keys of a sequence are cut into `num_splits` contiguous ranges; one CTA per (sequence,
// kv_head, split) computes the range's partial softmax-weighted sum and its log-sum-exp, and a
// second kernel merges the splits of each (sequence, head) with a log-sum-exp rescale. With one
// split the first kernel writes `out` directly and no workspace is used. Design, work split and
// bytes moved: top of decode_attention.cu.
//
// Accuracy: q is multiplied by scale * log2(e) in f32 and rounded to the cache dtype, and the
// softmax weights are rounded to it before the P * V product (tensor-core inputs); every sum is
// f32. Against ref::PagedAttention the largest difference stays within 1e-2 of the output scale
// for bf16 and 2e-3 for f16 (short contexts err most: one rounded weight moves the output most).
//
// Plain C++ header: the launcher takes device pointers and a stream, queues two kernels at most,
// returns the launch error, and never allocates or synchronises; the split count depends only on
// host-known sizes, so one captured CUDA graph serves any seq_lens up to max_seq_len.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/attention_args.h"

namespace loom::cuda {

// Largest GQA group (num_heads / num_kv_heads) served: the group's query rows share one 16-row
// tensor-core tile.
inline constexpr int32_t kDecodeAttentionMaxGroup = 16;

// True when DecodeAttention can serve `args`: cache dtype bf16 or f16, head_dim 64, 128 or 256,
// num_kv_heads >= 1, num_heads a positive multiple of num_kv_heads with a group of at most
// kDecodeAttentionMaxGroup, block_size >= 1, and the K and V cache pointers 16-byte aligned.
// Looks at sizes and pointers only; makes no CUDA call.
bool DecodeAttentionSupports(const PagedAttentionArgs& args);

// The number of KV splits DecodeAttention uses: a pure function of the sizes (head_dim fixes how
// many CTAs fit on an SM) and the device's SM count, so it does not change between graph replays.
// 1 means no workspace is needed. Makes no CUDA call.
int32_t DecodeAttentionNumSplits(int32_t num_seqs, int32_t num_kv_heads, int32_t head_dim,
                                 int32_t max_seq_len, int32_t sm_count);

// Workspace bytes that suffice for every call with these sizes, on any device and any
// num_kv_heads: f32 partial outputs [num_seqs, num_heads, num_splits, head_dim] and their
// log-sum-exps [num_seqs, num_heads, num_splits]. 0 when max_seq_len is short enough that one
// split is always used. Makes no CUDA call.
size_t DecodeAttentionWorkspaceBytes(int32_t num_seqs, int32_t num_heads, int32_t head_dim,
                                     int32_t max_seq_len);

// Attention for every sequence s with exactly one query row (query_start[s + 1] - query_start[s]
// == 1); sequences with 0 or >= 2 query rows are skipped and their output rows left untouched.
// `max_seq_len` is a host-known upper bound of every seq_lens[s] (e.g. max_blocks_per_seq *
// block_size); it sets the split count, while each sequence's keys are spread over the splits by
// its actual length on the device. `workspace` (16-byte aligned) needs
// DecodeAttentionWorkspaceBytes(...) bytes, or at least the exact need of this call; it may be
// null when the split count is 1. Returns cudaErrorInvalidValue for unsupported arguments,
// negative sizes or a too-small workspace, a CUDA error from querying the device, or the launch
// error; cudaSuccess without a launch when there is no sequence.
cudaError_t DecodeAttention(const PagedAttentionArgs& args, int32_t max_seq_len, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream);

}  // namespace loom::cuda
