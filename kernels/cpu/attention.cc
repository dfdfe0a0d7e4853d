#include "kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>

#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/ops_ref.h"

namespace loom::cpu {
namespace {

constexpr size_t kAlign = 64;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Query rows per item: enough query vectors (rows x GQA group) to amortise each K/V block's
// conversion, few enough that their accumulators stay in L1/L2.
int32_t RowsPerItem(const PagedAttentionArgs& args) {
  const int32_t group = args.num_heads / args.cache.num_kv_heads;
  return std::max(1, 64 / group);
}

int64_t CountItems(const PagedAttentionArgs& args, int32_t rows_per_item) {
  int64_t tiles = 0;
  for (int32_t s = 0; s < args.num_seqs; ++s) {
    const int32_t rows = args.query_start[s + 1] - args.query_start[s];
    tiles += (rows + rows_per_item - 1) / rows_per_item;
  }
  return tiles * args.cache.num_kv_heads;
}

}  // namespace

size_t ItemScratchFloats(const PagedAttentionArgs& args, int32_t rows_per_item) {
  const int32_t group = args.num_heads / args.cache.num_kv_heads;
  const size_t head_dim = args.cache.head_dim;
  const size_t padded_block = (args.cache.block_size + 15) / 16 * 16;
  const size_t queries = static_cast<size_t>(rows_per_item) * group;
  // K^T block, V block, scores, then per query: running max, running sum, accumulator.
  const size_t floats = head_dim * padded_block + padded_block * head_dim + padded_block +
                        2 * queries + queries * head_dim;
  return AlignUp(floats * sizeof(float)) / sizeof(float);
}

size_t PagedAttentionWorkspaceBytes(const PagedAttentionArgs& args, int num_threads) {
  const int32_t rows_per_item = RowsPerItem(args);
  const size_t table = AlignUp(sizeof(AttentionItem) * CountItems(args, rows_per_item) + kAlign);
  return table + static_cast<size_t>(num_threads) * ItemScratchFloats(args, rows_per_item) *
                     sizeof(float);
}

void PagedAttention(ThreadPool& pool, const PagedAttentionArgs& args, void* workspace, Isa isa) {
  if (isa < Isa::kAvx2) return ref::PagedAttention(args);
  const int32_t rows_per_item = RowsPerItem(args);
  const int64_t num_items = CountItems(args, rows_per_item);
  if (num_items == 0) return;

  // Item table. Threads pull items in table order from a shared counter; each sequence's tiles
  // are listed last-rows-first, so the costliest tiles of a long causal prompt start early and
  // the cheap ones fill the gaps at the end.
  char* base = static_cast<char*>(workspace);
  auto* counter = reinterpret_cast<std::atomic<int64_t>*>(base);
  new (counter) std::atomic<int64_t>(0);
  AttentionItem* items = reinterpret_cast<AttentionItem*>(base + kAlign);
  int64_t n = 0;
  for (int32_t s = 0; s < args.num_seqs; ++s) {
    const int32_t begin = args.query_start[s], end = args.query_start[s + 1];
    for (int32_t row_end = end; row_end > begin; row_end -= rows_per_item) {
      const int32_t row_begin = std::max(begin, row_end - rows_per_item);
      for (int32_t h = 0; h < args.cache.num_kv_heads; ++h) {
        items[n++] = AttentionItem{s, h, row_begin, row_end};
      }
    }
  }
  float* scratch_base = reinterpret_cast<float*>(
      base + AlignUp(sizeof(AttentionItem) * num_items + kAlign));
  const size_t scratch_floats = ItemScratchFloats(args, rows_per_item);
  auto kernel = isa >= Isa::kAvx512 ? &avx512::AttentionItemKernel : &avx2::AttentionItemKernel;
  auto work = [&](int64_t, int64_t, int thread) {
    float* scratch = scratch_base + thread * scratch_floats;
    for (int64_t i = counter->fetch_add(1); i < num_items; i = counter->fetch_add(1)) {
      kernel(args, items[i], scratch);
    }
  };
  if (num_items == 1 || pool.num_threads() == 1) {
    work(0, 0, 0);
  } else {
    pool.RunOnAllThreads(work);
  }
}

}  // namespace loom::cpu
