// Arguments of the paged-attention and KV-cache kernels, shared by every implementation
// (kernels/ref, kernels/cpu, kernels/cuda).
//
// KV cache layout, per layer:  k, v: [num_blocks, num_kv_heads, block_size, head_dim]
// A token at position p of a sequence lives in block block_table[p / block_size], slot
// p % block_size. A batch is ragged: sequence s owns query rows [query_start[s],
// query_start[s + 1]), which are its last (query_start[s + 1] - query_start[s]) positions, ending
// at position seq_lens[s] - 1.
//
// Low-bit formats (kKvInt8/4/2) store each layer's blocks packed (kernels/common/kv_format.h)
// plus a bf16 residual tail per sequence: sequence s reads its newest blocks (KvBlockInTail) from
// tail slot tail_slots[s] and every other block from its packed form. The write kernel packs a
// block in the step that writes its last token.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/kv_format.h"

namespace loom {

struct PagedKvView {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kBF16;  // kF32, kBF16, kF16, kF8E4M3 or a low-bit kKvInt*
  int32_t num_blocks = 0;
  int32_t num_kv_heads = 0;
  int32_t block_size = 0;
  int32_t head_dim = 0;
  // Low-bit formats only: K grouped per token instead of per channel, and the residual tails
  // (bf16 [num_tail_slots, num_kv_heads, tail_blocks * block_size, head_dim]).
  bool k_per_token = false;
  // Low-bit formats: where each code of a head block sits (kernels/common/kv_format.h); the
  // backend whose kernels read the pool chooses it.
  KvCodeOrder code_order = KvCodeOrder::kRows;
  void* tail_k = nullptr;
  void* tail_v = nullptr;
  int32_t num_tail_slots = 0;
  int32_t tail_blocks = 1;  // blocks in each tail's ring (kernels/common/kv_format.h)
  // K and V are stored rotated by the normalized Hadamard transform over head_dim (the layer
  // rotates q, k and v before the cache write and attention, and the attention output back;
  // ref::HadamardRotate). The kernels need not know: q . k and the output are unchanged.
  bool hadamard = false;

  bool low_bit() const { return IsLowBitKvDType(dtype); }
  KvPackedLayout packed() const {
    return {TraitsOf(dtype).kv_code_bits, block_size, head_dim, k_per_token, code_order};
  }
  // Element formats: elements between consecutive blocks / heads / slots.
  int64_t block_stride() const { return int64_t{num_kv_heads} * block_size * head_dim; }
  int64_t head_stride() const { return int64_t{block_size} * head_dim; }
  // Low-bit formats: bf16 elements between consecutive tail slots / heads of a slot; row
  // (b % tail_blocks) * block_size + p % block_size of a head holds position p of block b.
  int64_t tail_slot_stride() const { return int64_t{num_kv_heads} * tail_head_stride(); }
  int64_t tail_head_stride() const { return int64_t{tail_blocks} * block_size * head_dim; }
  // The first element of position `pos` of (tail slot, kv head).
  int64_t tail_index(int32_t slot, int32_t kv_head, int32_t pos) const {
    const int32_t b = pos / block_size;
    return int64_t{slot} * tail_slot_stride() + int64_t{kv_head} * tail_head_stride() +
           (int64_t{b % tail_blocks} * block_size + pos % block_size) * head_dim;
  }
  // Low-bit formats: the head block of (block, kv_head) in the K or V region.
  const uint8_t* k_head_block(int32_t block, int32_t kv_head) const {
    return static_cast<const uint8_t*>(k) +
           (int64_t{block} * num_kv_heads + kv_head) * packed().k_head_bytes();
  }
  const uint8_t* v_head_block(int32_t block, int32_t kv_head) const {
    return static_cast<const uint8_t*>(v) +
           (int64_t{block} * num_kv_heads + kv_head) * packed().v_head_bytes();
  }
};

// A KV cache's format and the shape its kernels must serve, as checked at start.
struct KvFormatSpec {
  DType dtype = DType::kBF16;
  bool k_per_token = false;  // low-bit formats: K grouped per token instead of per channel
  int32_t head_dim = 0;
  int32_t block_size = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t tail_blocks = 1;  // low-bit formats: blocks in each residual tail's ring
  bool hadamard = false;    // K/V stored in the Hadamard-rotated basis (head_dim a power of two)
  // Low-bit formats: where the codes sit (kv_format.h).
  KvCodeOrder code_order = KvCodeOrder::kRows;
};

// Where each sequence of a ragged batch is: the same arrays PagedAttentionArgs carries. The
// low-bit write kernel needs them (it packs per sequence and block); element formats do not.
struct KvBatchLayout {
  int32_t num_seqs = 0;
  const int32_t* query_start = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;     // [num_seqs]
  const int32_t* tail_slots = nullptr;   // [num_seqs]; -1: a padding sequence, written nowhere
  const int32_t* tail_first_blocks = nullptr;  // [num_seqs] (kv_format.h); null: all 0
};

// Writes K/V rows into the cache: row t goes to slot slot_mapping[t] = block * block_size + offset.
// A negative slot skips the row.
struct KvWriteArgs {
  const float* k = nullptr;  // [num_tokens, num_kv_heads, head_dim], row stride k_stride
  const float* v = nullptr;  // [num_tokens, num_kv_heads, head_dim], row stride v_stride
  int64_t k_stride = 0;
  int64_t v_stride = 0;
  int32_t num_tokens = 0;
  const int32_t* slot_mapping = nullptr;  // [num_tokens]
  PagedKvView cache;
  KvBatchLayout batch;  // low-bit formats
};

struct PagedAttentionArgs {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim], row stride q_stride
  int64_t q_stride = 0;
  float* out = nullptr;  // [num_tokens, num_heads, head_dim], row stride out_stride
  int64_t out_stride = 0;
  int32_t num_heads = 0;  // a multiple of cache.num_kv_heads (GQA groups)
  PagedKvView cache;
  int32_t num_seqs = 0;
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;      // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  // Low-bit formats: each sequence's tail slot ([num_seqs]); a sequence with none (-1, padding)
  // reads every block from the packed pool instead.
  const int32_t* tail_slots = nullptr;
  // Low-bit formats: each sequence's first block it computed itself (kv_format.h KvBlockInTail);
  // null: all 0.
  const int32_t* tail_first_blocks = nullptr;
  // Low-bit formats: the step's own K and V rows, as written to the cache this step (KvWriteArgs
  // k / v: [num_tokens, num_kv_heads, head_dim], row strides fresh_k_stride / fresh_v_stride).
  // When set, a sequence with more than one query row (a prefill chunk) reads the keys and values
  // of its own query positions from here, rounded to bf16 as its residual tail holds them,
  // instead of from their packed blocks: a chunk attends to itself at the precision of the tail,
  // and only keys of earlier steps are read packed (KIVI: prefill in full precision). Sequences
  // with one query row (decodes) read the cache as before. Null: every key from the cache.
  // Honoured by the reference and CPU kernels; the CUDA kernels read the cache.
  const float* fresh_k = nullptr;
  const float* fresh_v = nullptr;
  int64_t fresh_k_stride = 0;
  int64_t fresh_v_stride = 0;
  // The first position sequence `seq` reads from fresh_k / fresh_v (its step row is
  // query_start[seq] + position - FreshFirst(seq)); seq_lens[seq] when it reads none.
  int32_t FreshFirst(int32_t seq) const {
    const int32_t rows = query_start[seq + 1] - query_start[seq];
    return cache.low_bit() && fresh_k != nullptr && rows > 1 ? seq_lens[seq] - rows
                                                             : seq_lens[seq];
  }
  float scale = 1.0f;  // multiplies q.k before the softmax
  // 0: full causal attention. w > 0: a query at position p sees keys at (p - w, p].
  int32_t sliding_window = 0;
  // What the host knows about the batch without reading device memory: the number of query
  // rows (query_start[num_seqs]) and bounds of every sequence's query length. Backends that
  // launch per-shape kernels use them to size grids and skip kernels with no work; 0 = unknown
  // (the bounds then default to [0, num_tokens]).
  int32_t num_tokens = 0;
  int32_t min_query_len = 0;
  int32_t max_query_len = 0;
};

}  // namespace loom
