#include "kernels/ref/kv_quant_ref.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace loom::ref {
namespace {

// The f16 scale/zero arrays after the codes.
const uint16_t* Scales(const uint8_t* head_block, const KvPackedLayout& layout) {
  return reinterpret_cast<const uint16_t*>(head_block + layout.codes_bytes());
}

}  // namespace

void PackHeadBlock(const float* rows, int64_t row_stride, const KvPackedLayout& layout, bool is_v,
                   uint8_t* dst) {
  const bool per_token = is_v || layout.k_per_token;
  const int32_t num_params = is_v ? layout.v_num_params() : layout.k_num_params();
  const int32_t group_len = per_token ? layout.head_dim : layout.block_size;
  auto value = [&](int32_t group, int32_t i) {
    return per_token ? rows[group * row_stride + i] : rows[i * row_stride + group];
  };
  std::memset(dst, 0, static_cast<size_t>(layout.codes_bytes()));
  uint16_t* scales = reinterpret_cast<uint16_t*>(dst + layout.codes_bytes());
  uint16_t* zeros = scales + num_params;
  for (int32_t g = 0; g < num_params; ++g) {
    float lo = value(g, 0), hi = lo;
    for (int32_t i = 1; i < group_len; ++i) {
      lo = std::min(lo, value(g, i));
      hi = std::max(hi, value(g, i));
    }
    const KvGroupParams params = KvChooseParams(lo, hi, layout.max_code());
    scales[g] = params.scale;
    zeros[g] = params.zero;
    for (int32_t i = 0; i < group_len; ++i) {
      const int32_t code = KvQuantizeValue(value(g, i), params, layout.max_code());
      const int32_t slot = per_token ? g : i;
      const int32_t d = per_token ? i : g;
      KvSetCode(dst, layout, is_v, slot, d, code);
    }
  }
}

float UnpackHeadBlockElement(const uint8_t* head_block, const KvPackedLayout& layout, bool is_v,
                             int32_t slot, int32_t d) {
  const bool per_token = is_v || layout.k_per_token;
  const int32_t num_params = is_v ? layout.v_num_params() : layout.k_num_params();
  const uint16_t* scales = Scales(head_block, layout);
  const int32_t g = per_token ? slot : d;
  const int32_t code = KvGetCode(head_block, layout, is_v, slot, d);
  return KvDequantizeValue(code, {scales[g], scales[num_params + g]});
}

float LoadKvElement(const PagedKvView& cache, const int32_t* blocks, int32_t seq_len,
                    int32_t tail_slot, int32_t tail_first_block, bool is_v, int32_t pos,
                    int32_t kv_head, int32_t d) {
  const int32_t b = pos / cache.block_size;
  const int32_t slot = pos % cache.block_size;
  if (!cache.low_bit()) {
    const int64_t index = int64_t{blocks[b]} * cache.block_stride() +
                          int64_t{kv_head} * cache.head_stride() + int64_t{slot} * cache.head_dim +
                          d;
    return LoadAsF32(is_v ? cache.v : cache.k, cache.dtype, static_cast<size_t>(index));
  }
  if (tail_slot >= 0 &&
      KvBlockInTail(b, seq_len, cache.block_size, cache.tail_blocks, tail_first_block)) {
    const int64_t index = cache.tail_index(tail_slot, kv_head, pos) + d;
    return Bf16ToF32(static_cast<const uint16_t*>(is_v ? cache.tail_v : cache.tail_k)[index]);
  }
  const uint8_t* head_block =
      is_v ? cache.v_head_block(blocks[b], kv_head) : cache.k_head_block(blocks[b], kv_head);
  return UnpackHeadBlockElement(head_block, cache.packed(), is_v, slot, d);
}

void WriteKvLowBit(const KvWriteArgs& args) {
  const PagedKvView& cache = args.cache;
  const KvPackedLayout layout = cache.packed();
  const int32_t bs = cache.block_size, head_dim = cache.head_dim;
  std::vector<float> rows(static_cast<size_t>(bs) * head_dim);
  for (int32_t s = 0; s < args.batch.num_seqs; ++s) {
    const int32_t tail = args.batch.tail_slots[s];
    if (tail < 0) continue;
    const int32_t tail_first =
        args.batch.tail_first_blocks != nullptr ? args.batch.tail_first_blocks[s] : 0;
    const int32_t row_begin = args.batch.query_start[s];
    const int32_t row_end = args.batch.query_start[s + 1];
    const int32_t seq_len = args.batch.seq_lens[s];
    const int32_t first = seq_len - (row_end - row_begin);  // position of row_begin
    for (int32_t h = 0; h < cache.num_kv_heads; ++h) {
      for (int32_t is_v = 0; is_v < 2; ++is_v) {
        const float* input = is_v ? args.v : args.k;
        const int64_t stride = is_v ? args.v_stride : args.k_stride;
        uint16_t* tail_rows = static_cast<uint16_t*>(is_v ? cache.tail_v : cache.tail_k);
        auto input_row = [&](int32_t pos) {
          return input + int64_t{row_begin + pos - first} * stride + int64_t{h} * head_dim;
        };
        // 1. Pack every block this step fills: its rows before `first` are in the tail (only the
        // step's first block has such rows), the rest are new. Rows are packed from their bf16
        // values wherever they come from, so a block packs the same whether it filled in one
        // step or across several.
        for (int32_t b = first / bs; (b + 1) * bs <= seq_len; ++b) {
          for (int32_t i = 0; i < bs; ++i) {
            const int32_t pos = b * bs + i;
            float* row = rows.data() + int64_t{i} * head_dim;
            for (int32_t d = 0; d < head_dim; ++d) {
              row[d] = Bf16ToF32(pos < first ? tail_rows[cache.tail_index(tail, h, pos) + d]
                                             : F32ToBf16(input_row(pos)[d]));
            }
          }
          const int32_t block = args.slot_mapping[row_begin + (b * bs + bs - 1 - first)] / bs;
          uint8_t* dst = const_cast<uint8_t*>(is_v ? cache.v_head_block(block, h)
                                                   : cache.k_head_block(block, h));
          PackHeadBlock(rows.data(), head_dim, layout, is_v != 0, dst);
        }
        // 2. The new rows of the blocks read from the tail from now on.
        for (int32_t pos = first; pos < seq_len; ++pos) {
          if (!KvBlockInTail(pos / bs, seq_len, bs, cache.tail_blocks, tail_first)) continue;
          uint16_t* dst = tail_rows + cache.tail_index(tail, h, pos);
          for (int32_t d = 0; d < head_dim; ++d) dst[d] = F32ToBf16(input_row(pos)[d]);
        }
      }
    }
  }
}

}  // namespace loom::ref
