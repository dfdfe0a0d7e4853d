// CPU paged attention over a ragged batch (contract: kernels/common/attention_args.h; math:
// kernels/ref/ops_ref.h PagedAttention).
//
// Work is split into items of (sequence, KV head, tile of query rows); an item handles every
// query head of its GQA group, so each K/V block it reads from the cache is converted to f32
// once and reused by all of the group's heads and rows. Blocks are loaded in spans of at least
// 64 keys (ItemSpanBlocks) and K is transposed on conversion ([head_dim, span]), so scores for a
// run of keys are plain FMAs with a broadcast query element and the softmax bookkeeping is paid
// once per span; the softmax is the online (flash) form, so nothing of size sequence length is
// materialised. Threads take items from a shared counter (causal tiles differ in cost).
// Bytes moved per item: its sequence's visible K/V blocks once.
//
// Sequences with a single query row (decode) go to the decode path instead
// (kernels/cpu/attention_decode.h), which reads K/V in their stored format without the f32
// block copy, whenever it serves the shape (head_dim a multiple of 32, at most 512; low-bit codes
// in the lanes order); both kinds of item share one call, one counter and the pool's threads.
#pragma once

#include <cstddef>

#include "kernels/common/attention_args.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace loom::cpu {

// The code order of low-bit KV caches the CPU kernels are built for (kernels/common/kv_format.h):
// the decode path reads only it; the prefill items read either.
inline constexpr KvCodeOrder kKvCodeOrder = KvCodeOrder::kLanes;

// Bytes of scratch PagedAttention needs for these arguments on `num_threads` threads. It depends
// on the batch (query rows and sequence lengths decide the items and split-KV partials): size it
// per call, with the thread count of the pool that runs it.
size_t PagedAttentionWorkspaceBytes(const PagedAttentionArgs& args, int num_threads);

// `workspace` must hold PagedAttentionWorkspaceBytes(args, pool.num_threads()) bytes, aligned
// to 64 bytes. `isa` picks the implementation (tests pass each level; below kAvx2 the
// reference runs).
void PagedAttention(ThreadPool& pool, const PagedAttentionArgs& args, void* workspace,
                    Isa isa = SelectedIsa());

// One item, per instruction set (attention_avx2.cc, attention_avx512.cc). `scratch` is this
// thread's part of the workspace (ItemScratchFloats floats).
struct AttentionItem {
  int32_t seq = 0;
  int32_t kv_head = 0;
  int32_t row_begin = 0;  // query rows [row_begin, row_end) of the batch
  int32_t row_end = 0;
};
// Queries (heads of one kv head and row) an item kernel runs together at most; its scratch holds
// their scores.
constexpr int32_t kItemQueriesAtOnce = 4;
size_t ItemScratchFloats(const PagedAttentionArgs& args, int32_t rows_per_item);
// Consecutive blocks an item loads and scores together: at least 64 keys.
int32_t ItemSpanBlocks(int32_t block_size);
namespace avx2 {
void AttentionItemKernel(const PagedAttentionArgs& args, const AttentionItem& item, float* scratch);
}
namespace avx512 {
void AttentionItemKernel(const PagedAttentionArgs& args, const AttentionItem& item, float* scratch);
}

}  // namespace loom::cpu
