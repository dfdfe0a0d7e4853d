#include "kernels/cpu/attention_decode.h"

#include <algorithm>
#include <cmath>

namespace loom::cpu {
namespace {

constexpr float kNegInf = -__builtin_inff();

// A split-KV chunk is never shorter than this: below it the partial's write and merge cost
// more than the balance gains.
constexpr int64_t kMinChunkKeys = 1024;
// Items per thread the split aims for, so that uneven chunk costs still even out.
constexpr int64_t kItemsPerThread = 8;

// First and one-past-last key a decode sequence's query sees.
void VisibleKeys(const PagedAttentionArgs& args, int32_t seq, int32_t* begin, int32_t* end) {
  const int32_t pos = args.seq_lens[seq] - 1;
  *begin = args.sliding_window > 0 ? std::max(0, pos - args.sliding_window + 1) : 0;
  *end = pos + 1;
}

int32_t NumChunks(int32_t begin, int32_t end, int32_t chunk_keys) {
  return (end - 1) / chunk_keys - begin / chunk_keys + 1;
}

}  // namespace

bool DecodePathSupports(const PagedAttentionArgs& args) {
  const PagedKvView& cache = args.cache;
  if (cache.head_dim <= 0 || cache.head_dim % 32 != 0 || cache.head_dim > 512) return false;
  switch (cache.dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
    case DType::kF8E4M3:
      return true;
    case DType::kKvInt8:
    case DType::kKvInt4:
    case DType::kKvInt2:
      // The integer kernels read the lanes order in whole 64-byte tiles.
      return cache.code_order == KvCodeOrder::kLanes && cache.block_size % 16 == 0;
    default:
      return false;
  }
}

bool IsDecodeSequence(const PagedAttentionArgs& args, int32_t seq) {
  return args.query_start[seq + 1] - args.query_start[seq] == 1 && args.seq_lens[seq] >= 1;
}

DecodePlan PlanDecode(const PagedAttentionArgs& args, int num_threads) {
  DecodePlan plan;
  if (!DecodePathSupports(args)) return plan;
  const int32_t bs = args.cache.block_size;
  int64_t total_keys = 0;
  for (int32_t s = 0; s < args.num_seqs; ++s) {
    if (!IsDecodeSequence(args, s)) continue;
    int32_t begin, end;
    VisibleKeys(args, s, &begin, &end);
    total_keys += int64_t{end - begin} * args.cache.num_kv_heads;
  }
  // One chunk per (sequence, KV head) unless the threads would otherwise run out of items.
  int64_t chunk = int64_t{1} << 30;
  if (num_threads > 1) {
    const int64_t target = (total_keys + kItemsPerThread * num_threads - 1) /
                           (kItemsPerThread * num_threads);
    chunk = std::max(kMinChunkKeys, target);
  }
  chunk = (chunk + bs - 1) / bs * bs;
  plan.chunk_keys = static_cast<int32_t>(std::min<int64_t>(chunk, int64_t{1} << 30));
  for (int32_t s = 0; s < args.num_seqs; ++s) {
    if (!IsDecodeSequence(args, s)) continue;
    int32_t begin, end;
    VisibleKeys(args, s, &begin, &end);
    const int64_t chunks = NumChunks(begin, end, plan.chunk_keys);
    plan.num_items += chunks * args.cache.num_kv_heads;
    if (chunks > 1) plan.num_partials += chunks * args.cache.num_kv_heads;
  }
  return plan;
}

void FillDecodeItems(const PagedAttentionArgs& args, const DecodePlan& plan, DecodeItem* items) {
  if (plan.num_items == 0) return;  // the decode path does not serve this shape
  int64_t n = 0;
  int32_t partial = 0;
  for (int32_t s = 0; s < args.num_seqs; ++s) {
    if (!IsDecodeSequence(args, s)) continue;
    int32_t begin, end;
    VisibleKeys(args, s, &begin, &end);
    const int32_t chunks = NumChunks(begin, end, plan.chunk_keys);
    for (int32_t h = 0; h < args.cache.num_kv_heads; ++h) {
      if (chunks == 1) {
        items[n++] = DecodeItem{s, h, begin, end, -1};
        continue;
      }
      for (int32_t c = begin / plan.chunk_keys; c <= (end - 1) / plan.chunk_keys; ++c) {
        const int32_t lo = std::max(begin, c * plan.chunk_keys);
        const int32_t hi = std::min(end, (c + 1) * plan.chunk_keys);
        items[n++] = DecodeItem{s, h, lo, hi, partial++};
      }
    }
  }
}

size_t DecodePartialFloats(const PagedAttentionArgs& args) {
  const size_t group = args.num_heads / args.cache.num_kv_heads;
  return group * (2 + static_cast<size_t>(args.cache.head_dim));
}

size_t DecodeScratchFloats(const PagedAttentionArgs& args) {
  const size_t group = args.num_heads / args.cache.num_kv_heads;
  const size_t head_dim = args.cache.head_dim;
  const size_t padded_block = (args.cache.block_size + 15) / 16 * 16;
  // q (scaled), q folded with per-channel K scales (a tile of 4 heads), scores, accumulators,
  // per-head running max / sum / zero term / correction / sum of q, per-block scales
  // and zeros (K per channel: head_dim each; per token: block_size; V: block_size); the integer
  // path's q scales and offsets (2 x group), q images (group x 2 head_dim bytes), rounded weights
  // (group x padded block int16), the running sums and zero terms as vectors (2 x group x 16),
  // and the weights' scales and block maxima (2 x group).
  const size_t floats = group * head_dim + 4 * head_dim + group * padded_block +
                        group * head_dim + 5 * group + 2 * std::max(head_dim, padded_block) +
                        2 * padded_block + 2 * group + group * 2 * head_dim / 4 +
                        group * padded_block / 2 + 2 * group * 16 + 2 * group;
  return (floats + 15) / 16 * 16;
}

void MergeDecodePartials(const PagedAttentionArgs& args, const DecodeItem* items,
                         int64_t num_items, const float* partials) {
  const int32_t group = args.num_heads / args.cache.num_kv_heads;
  const int32_t head_dim = args.cache.head_dim;
  const size_t stride = DecodePartialFloats(args);
  for (int64_t i = 0; i < num_items;) {
    if (items[i].partial < 0) {
      ++i;
      continue;
    }
    int64_t j = i;
    while (j < num_items && items[j].partial >= 0 && items[j].seq == items[i].seq &&
           items[j].kv_head == items[i].kv_head) {
      ++j;
    }
    // Partial layout: max [group], sum [group], output [group][head_dim] (not normalised).
    const int32_t row = args.query_start[items[i].seq];
    for (int32_t g = 0; g < group; ++g) {
      float max_all = kNegInf;
      for (int64_t p = i; p < j; ++p) {
        max_all = std::max(max_all, partials[items[p].partial * stride + g]);
      }
      float* out = args.out + int64_t{row} * args.out_stride +
                   int64_t{items[i].kv_head * group + g} * head_dim;
      std::fill(out, out + head_dim, 0.0f);
      float sum = 0.0f;
      for (int64_t p = i; p < j; ++p) {
        const float* part = partials + items[p].partial * stride;
        if (part[g] == kNegInf) continue;
        const float weight = std::exp(part[g] - max_all);
        sum += part[group + g] * weight;
        const float* acc = part + 2 * group + int64_t{g} * head_dim;
        for (int32_t d = 0; d < head_dim; ++d) out[d] += acc[d] * weight;
      }
      const float inv = 1.0f / sum;
      for (int32_t d = 0; d < head_dim; ++d) out[d] *= inv;
    }
    i = j;
  }
}

}  // namespace loom::cpu
