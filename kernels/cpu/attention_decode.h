// The decode path of CPU paged attention: sequences whose step has a single query row, read
// straight from the cache in its stored format (f32, bf16, f16, fp8 elements, or the packed
// low-bit codes of kernels/common/kv_format.h with the bf16 residual tail). cpu::PagedAttention
// (attention.h) sends every other sequence to the item kernel of attention_impl.inc.
//
// Math, per (sequence, KV head) and all G query heads of its GQA group at once, block by block:
//   element formats and tail rows:  s_hk = q_h . K_k,  out_h += p_hk V_k
//   low-bit, K per channel:  K_kd = c_kd a_d + z_d, so s_hk = (q_h * a) . c_k + q_h . z: the scale
//                            is folded into q once per block, the zero term is one constant
//   low-bit, K per token:    s_hk = a_k (q_h . c_k) + z_k sum_d q_hd
//   low-bit V (per token):   out_h += (p_hk b_k) c_k, plus (sum_k p_hk y_k) added to every element
// (c codes, a/b scales, z/y zeros), with the online softmax across blocks. Element formats and
// tail rows are converted to f32 once per vector chunk and shared by the group's heads. Packed
// blocks (codes in the lanes order, kernels/common/kv_format.h) take integer dot products
// (attention_decode_int.inc): q rounded to int8 (int4/int2 codes) or int16 (int8 codes) once per
// block (K per channel) or item (per token), the block's weights p_hk b_k rounded to uint8
// (int16 for int8 codes) for V; the rounding errors are centred on the middle code.
//
// Work split: items of (sequence, KV head, range of keys). With several threads and too few
// (sequence, KV head) pairs to keep them busy, a sequence's keys are cut into block-aligned
// chunks (split-KV); each chunk leaves a partial (running max, sum, unnormalised output) and
// MergeDecodePartials combines them with a log-sum-exp. Bytes read per item: its keys' K and V
// once (codes, scales, zeros, tail rows), with the next blocks prefetched while one is computed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/attention_args.h"

namespace loom::cpu {

// True when the decode path serves this cache shape and format (head_dim a multiple of 32 and at
// most 512; any KV cache format, low-bit codes in the lanes order).
bool DecodePathSupports(const PagedAttentionArgs& args);

// True when sequence `seq` runs on the decode path: one query row and a non-empty context.
bool IsDecodeSequence(const PagedAttentionArgs& args, int32_t seq);

// Keys [key_begin, key_end) of one sequence and KV head. `partial` is -1 when the item covers
// all of the sequence's visible keys (it writes the output), else the index of its partial.
struct DecodeItem {
  int32_t seq = 0;
  int32_t kv_head = 0;
  int32_t key_begin = 0;
  int32_t key_end = 0;
  int32_t partial = -1;
};

// How the decode sequences of a batch are split for `num_threads` threads.
struct DecodePlan {
  int64_t num_items = 0;
  int64_t num_partials = 0;
  int32_t chunk_keys = 0;  // keys per split-KV chunk (a multiple of block_size)
};
DecodePlan PlanDecode(const PagedAttentionArgs& args, int num_threads);

// Writes the plan's items ([plan.num_items]); the chunks of one (sequence, KV head) are
// consecutive and numbered in order.
void FillDecodeItems(const PagedAttentionArgs& args, const DecodePlan& plan, DecodeItem* items);

// Floats of one partial: per query head of the group, max, sum and head_dim outputs.
size_t DecodePartialFloats(const PagedAttentionArgs& args);

// Floats of per-thread scratch the decode kernel needs.
size_t DecodeScratchFloats(const PagedAttentionArgs& args);

// Combines the partials of every split item into the output rows.
void MergeDecodePartials(const PagedAttentionArgs& args, const DecodeItem* items,
                         int64_t num_items, const float* partials);

// One item, per instruction set (attention_decode_avx2.cc, attention_decode_avx512.cc).
// `scratch`: DecodeScratchFloats floats; `partials`: the plan's partial storage.
namespace avx2 {
void DecodeItemKernel(const PagedAttentionArgs& args, const DecodeItem& item, float* scratch,
                      float* partials);
}
namespace avx512 {
void DecodeItemKernel(const PagedAttentionArgs& args, const DecodeItem& item, float* scratch,
                      float* partials);
}

}  // namespace loom::cpu
