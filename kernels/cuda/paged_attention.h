// CUDA paged attention over the KV cache: causal (optionally sliding-window) attention of every
// query row of a ragged batch — prefill chunks and decode tokens alike — over its sequence's
// cached keys, with GQA (contract and layout in kernels/common/attention_args.h, the same as
// ref::PagedAttention).
//
//   for token t of sequence s at position p, head h, kv_head = h / (num_heads / num_kv_heads):
//     score[j] = scale * q[t, h, :] . K[s, j, kv_head, :]     for j in [first(p), p]
//     out[t, h, :] = sum_j softmax(score)[j] * V[s, j, kv_head, :]
//   first(p) = 0, or p - sliding_window + 1 when a window is set (never below 0).
//
// Every KV format: the element formats (f32, bf16, f16, fp8 E4M3) are read directly; the low-bit
// formats through one device-side load (kernels/cuda/kv_format_inl.cuh) that mirrors
// ref::LoadKvElement: a full block (or any block of a sequence whose tail_slots entry is -1, or
// with tail_slots null) dequantized from its packed head block, the partial last block from the
// sequence's bf16 tail slot. This kernel serves the low-bit prefill rows (chunked prefill over
// cached, packed blocks) and every row of a shape the tensor-core kernels do not serve.
//
// Work split (this first version favours being obviously right over speed): one block of 128
// threads per (query row, head); each of its 4 warps walks every 4th key, the 32 lanes of a warp
// split head_dim (up to 8 elements per lane, so head_dim <= 256), reduce the dot product with
// shuffles and keep an online softmax (running max, running sum, rescaled accumulator) in f32;
// the warps' partial results are combined through shared memory with one log-sum-exp rescale.
// Bytes moved per (row, head): 2 * (keys seen) * head_dim * sizeof(cache dtype) + 8 * head_dim
// (low-bit: row_bytes of codes plus the group parameters per key row, each re-read by the lanes
// that share a byte; bf16 rows of the tail).
// GQA heads re-read their shared K/V (an L2 hit); the split-KV, head-folded tensor-core kernels
// for decode and prefill replace this one behind the same launcher.
// Accuracy: f32 throughout with expf; results differ from ref::PagedAttention by the order of
// summation (a few ulp of the output scale).
//
// Plain C++ header: the launcher takes device pointers (q, out, cache.k/v, query_start,
// seq_lens, block_tables; for low-bit formats cache.tail_k/tail_v and tail_slots) and a stream,
// queues the kernel and returns the launch error; it never allocates or synchronises.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/attention_args.h"

namespace loom::cuda {

// Which query rows a launch computes: all, or all but those of sequences with exactly one query
// row (the decode rows another kernel serves; their output rows are left untouched).
enum class PagedAttentionRows { kAll, kSkipDecode };

// True when PagedAttention serves a cache of this format and shape: head_dim in [1, 256],
// block_size >= 1, and for the low-bit formats head_dim a multiple of 32. Makes no CUDA call.
bool PagedAttentionSupports(const PagedKvView& cache);

// `num_tokens` is query_start[num_seqs] (the host knows it; the array lives on the device).
// Returns cudaErrorInvalidValue for negative sizes, num_heads not a multiple of num_kv_heads or a
// cache PagedAttentionSupports refuses; cudaSuccess without a launch when there is no query row.
cudaError_t PagedAttention(const PagedAttentionArgs& args, int32_t num_tokens,
                           cudaStream_t stream,
                           PagedAttentionRows rows = PagedAttentionRows::kAll);

}  // namespace loom::cuda
