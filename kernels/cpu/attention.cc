#include "kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>

#include "kernels/cpu/attention_decode.h"
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

// True when sequence `seq` is left to the decode path (attention_decode.h).
bool OnDecodePath(const PagedAttentionArgs& args, bool decode_path, int32_t seq) {
  return decode_path && IsDecodeSequence(args, seq);
}

// Items of the prefill (multi-row) kernel: every sequence the decode path does not take.
int64_t CountItems(const PagedAttentionArgs& args, int32_t rows_per_item, bool decode_path) {
  int64_t tiles = 0;
  for (int32_t s = 0; s < args.num_seqs; ++s) {
    if (OnDecodePath(args, decode_path, s)) continue;
    const int32_t rows = args.query_start[s + 1] - args.query_start[s];
    tiles += (rows + rows_per_item - 1) / rows_per_item;
  }
  return tiles * args.cache.num_kv_heads;
}

// Where each part of the workspace starts (PagedAttentionWorkspaceBytes sizes the same parts).
struct WorkspaceLayout {
  size_t items = 0;          // AttentionItem table (after the shared counter)
  size_t decode_items = 0;   // DecodeItem table
  size_t partials = 0;       // split-KV partials
  size_t scratch = 0;        // per-thread scratch
  size_t scratch_floats = 0; // per thread
  size_t total = 0;
};

WorkspaceLayout LayoutWorkspace(const PagedAttentionArgs& args, int num_threads,
                                int64_t num_items, const DecodePlan& plan) {
  WorkspaceLayout w;
  w.items = kAlign;
  w.decode_items = w.items + AlignUp(sizeof(AttentionItem) * num_items);
  w.partials = w.decode_items + AlignUp(sizeof(DecodeItem) * plan.num_items);
  w.scratch = w.partials + AlignUp(sizeof(float) * plan.num_partials * DecodePartialFloats(args));
  w.scratch_floats = std::max(num_items > 0 ? ItemScratchFloats(args, RowsPerItem(args)) : 0,
                              plan.num_items > 0 ? DecodeScratchFloats(args) : 0);
  w.total = w.scratch + static_cast<size_t>(num_threads) * w.scratch_floats * sizeof(float);
  return w;
}

}  // namespace

int32_t ItemSpanBlocks(int32_t block_size) { return std::max(1, 64 / std::max(1, block_size)); }

size_t ItemScratchFloats(const PagedAttentionArgs& args, int32_t rows_per_item) {
  const int32_t group = args.num_heads / args.cache.num_kv_heads;
  const size_t head_dim = args.cache.head_dim;
  const int32_t bs = args.cache.block_size;
  const size_t padded_span = (ItemSpanBlocks(bs) * bs + 15) / 16 * 16;
  const size_t queries = static_cast<size_t>(rows_per_item) * group;
  // K^T span, V span, scores of the queries run together, then per query: running max, running
  // sum, accumulator.
  const size_t floats = head_dim * padded_span + padded_span * head_dim +
                        kItemQueriesAtOnce * padded_span +
                        2 * queries + queries * head_dim;
  return AlignUp(floats * sizeof(float)) / sizeof(float);
}

size_t PagedAttentionWorkspaceBytes(const PagedAttentionArgs& args, int num_threads) {
  const bool decode_path = DecodePathSupports(args);
  const DecodePlan plan = PlanDecode(args, num_threads);
  const int64_t num_items = CountItems(args, RowsPerItem(args), decode_path);
  return LayoutWorkspace(args, num_threads, num_items, plan).total;
}

void PagedAttention(ThreadPool& pool, const PagedAttentionArgs& args, void* workspace, Isa isa) {
  if (isa < Isa::kAvx2) return ref::PagedAttention(args);
  const bool decode_path = DecodePathSupports(args);
  const DecodePlan plan = PlanDecode(args, pool.num_threads());
  const int32_t rows_per_item = RowsPerItem(args);
  const int64_t num_items = CountItems(args, rows_per_item, decode_path);
  const int64_t total_items = num_items + plan.num_items;
  if (total_items == 0) return;
  const WorkspaceLayout layout = LayoutWorkspace(args, pool.num_threads(), num_items, plan);

  // Item tables. Threads pull items in table order from a shared counter: the prefill items
  // first, then the decode items. Each sequence's prefill tiles are listed last-rows-first, so
  // the costliest tiles of a long causal prompt start early and the cheap ones fill the gaps.
  char* base = static_cast<char*>(workspace);
  auto* counter = reinterpret_cast<std::atomic<int64_t>*>(base);
  new (counter) std::atomic<int64_t>(0);
  AttentionItem* items = reinterpret_cast<AttentionItem*>(base + layout.items);
  int64_t n = 0;
  for (int32_t s = 0; s < args.num_seqs; ++s) {
    if (OnDecodePath(args, decode_path, s)) continue;
    const int32_t begin = args.query_start[s], end = args.query_start[s + 1];
    for (int32_t row_end = end; row_end > begin; row_end -= rows_per_item) {
      const int32_t row_begin = std::max(begin, row_end - rows_per_item);
      for (int32_t h = 0; h < args.cache.num_kv_heads; ++h) {
        items[n++] = AttentionItem{s, h, row_begin, row_end};
      }
    }
  }
  DecodeItem* decode_items = reinterpret_cast<DecodeItem*>(base + layout.decode_items);
  FillDecodeItems(args, plan, decode_items);
  float* partials = reinterpret_cast<float*>(base + layout.partials);
  float* scratch_base = reinterpret_cast<float*>(base + layout.scratch);
  const bool wide = isa >= Isa::kAvx512;
  auto kernel = wide ? &avx512::AttentionItemKernel : &avx2::AttentionItemKernel;
  auto decode_kernel = wide ? &avx512::DecodeItemKernel : &avx2::DecodeItemKernel;
  auto work = [&](int64_t, int64_t, int thread) {
    float* scratch = scratch_base + thread * layout.scratch_floats;
    for (int64_t i = counter->fetch_add(1); i < total_items; i = counter->fetch_add(1)) {
      if (i < num_items) {
        kernel(args, items[i], scratch);
      } else {
        decode_kernel(args, decode_items[i - num_items], scratch, partials);
      }
    }
  };
  if (total_items == 1 || pool.num_threads() == 1) {
    work(0, 0, 0);
  } else {
    pool.RunOnAllThreads(work);
  }
  if (plan.num_partials > 0) MergeDecodePartials(args, decode_items, plan.num_items, partials);
}

}  // namespace loom::cpu
