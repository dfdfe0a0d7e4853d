// Reference implementation of the low-bit KV formats (kernels/common/kv_format.h): packing a
// head block, reading one cached element in any KV format, and the low-bit cache write with its
// residual tail. Scalar and obviously correct; the CPU and CUDA kernels are tested against it.
#pragma once

#include <cstdint>

#include "kernels/common/attention_args.h"

namespace loom::ref {

// Quantizes one head block: `rows` [block_size][head_dim] f32 with row stride `row_stride`, into
// `dst` (layout.k_head_bytes() bytes for K, v_head_bytes() for V). V and per-token K group each
// row; per-channel K groups each column.
void PackHeadBlock(const float* rows, int64_t row_stride, const KvPackedLayout& layout, bool is_v,
                   uint8_t* dst);

// Element d of row `slot` of a packed head block, dequantized.
float UnpackHeadBlockElement(const uint8_t* head_block, const KvPackedLayout& layout, bool is_v,
                             int32_t slot, int32_t d);

// Element d of K (or V) at position `pos` of one sequence, KV head `kv_head`, whatever the cache
// format: `blocks` is the sequence's block table, `seq_len` its length this step, and
// `tail_slot` / `tail_first_block` its tail (low-bit formats: the blocks KvBlockInTail names are
// read there, unless tail_slot < 0).
float LoadKvElement(const PagedKvView& cache, const int32_t* blocks, int32_t seq_len,
                    int32_t tail_slot, int32_t tail_first_block, bool is_v, int32_t pos,
                    int32_t kv_head, int32_t d);

// The low-bit cache write (see KvWriteArgs, KvBatchLayout): per sequence, every block this step
// completes is packed from the tail's rows and the new rows; then the new rows of the blocks the
// sequence will read from its tail (KvBlockInTail at the new length) go to the tail.
void WriteKvLowBit(const KvWriteArgs& args);

}  // namespace loom::ref
