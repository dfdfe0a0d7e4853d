// The low-bit KV-cache formats (int8, int4, int2; DType::kKvInt*): how a block's codes, scales and
// zeros are laid out, how a group is quantized, and how a code is read back. Shared by the
// reference, CPU and CUDA kernels; every implementation must produce and read these bytes.
//
// Quantization (asymmetric min/max, KIVI-style):
//   a group g of values x: zero = f16(min g), scale = f16((max g - zero) / (2^bits - 1)),
//   code(x) = clamp(rint((x - zero) * inv), 0, 2^bits - 1), inv = 1 / scale (0 when scale is 0),
//   x' = code * scale + zero.
// Groups: K per channel (a group is one channel of one head over the block's block_size tokens)
// or per token (one token's head_dim values); V always per token.
//
// Layout of one block of one KV head (a "head block"), K and V each:
//   codes  [codes_bytes]             block_size * head_dim * bits / 8 bytes
//   scales [num_params] f16          num_params = head_dim (K per channel) or block_size
//   zeros  [num_params] f16
// A layer's K region is [num_blocks][num_kv_heads] head blocks, its V region likewise.
// Where each code sits in the codes is the pool's code order (KvCodeOrder), chosen by the backend
// whose kernels read it; P = 8 / bits codes share a byte.
//   kRows (CUDA): token rows of row_bytes = head_dim * bits / 8, row `slot` at slot * row_bytes.
//     Within a row, codes are packed in chunks of 32 elements (head_dim is a multiple of 32):
//       int8: byte j of the chunk holds element j.
//       int4: byte j (0..15) holds element j in its low nibble and element j + 16 in its high one.
//       int2: byte j (0..7) holds elements j, j + 8, j + 16, j + 24 in bits 0-1, 2-3, 4-5, 6-7.
//     These orders let a SIMD kernel unpack a chunk with shifts and masks into element order.
//   kLanes (CPU): tiles of 16 four-byte lanes (64 bytes). Plane t of a byte is bits [t * bits,
//     (t + 1) * bits). A lane's four bytes, one plane at a time, are the four codes an integer
//     dot-product instruction (vpdpbusd, pmaddubsw) multiplies with four bytes of the other
//     operand, so a register of unpacked codes needs no shuffling and no horizontal sums:
//       K: lane l of tile (kt, g) is key 16 kt + l, its byte j in plane t element 4 P g + 4 t + j;
//          tile (kt, g) at ((kt * head_dim / (4 P)) + g) * 64 (a key tile's 16 keys, all dims).
//       V: lane l of tile (c, kg) is channel 16 c + l, its byte j in plane t key 4 P kg + 4 t + j;
//          tile (c, kg) at ((c * block_size / (4 P)) + kg) * 64 (16 channels, all keys).
//     block_size is a multiple of 16 and head_dim of 32 (CheckKvLayout), so tiles are whole.
//
// Residual tail (KIVI's full-precision window): each sequence has a tail slot, a ring of
// tail_blocks blocks of bf16 rows, bf16 [num_tail_slots][num_kv_heads][tail_blocks * block_size]
// [head_dim] per layer for K and V; block b of the sequence sits in ring place b % tail_blocks.
// A sequence of length L with F = L / block_size full blocks reads block b from its tail when
//   b >= F - (tail_blocks - 1)  and  b >= tail_first_block
// (KvBlockInTail): its partial last block and its newest tail_blocks - 1 full ones, except blocks
// it did not compute itself (a prefix-cache hit: tail_first_block = the first block it computed).
// Every other block is read packed. A block is packed in the step that writes its last token
// (from the tail's rows and the new rows, all rounded to bf16), whatever the window, so only full,
// packed blocks are ever shared through the prefix cache; the window only decides which copy the
// owning sequence itself attends to. With tail_blocks = 1 the tail is exactly the partial block.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/dtype.h"

namespace loom {

// Whether block `b` of a sequence of length `seq_len` is read from the sequence's tail (see the
// file comment).
inline bool KvBlockInTail(int32_t b, int32_t seq_len, int32_t block_size, int32_t tail_blocks,
                          int32_t tail_first_block) {
  return b >= tail_first_block && b >= seq_len / block_size - (tail_blocks - 1);
}

// Chunk of elements the code packing works in; head_dim must be a multiple of it.
inline constexpr int32_t kKvPackChunk = 32;

// Where each code of a head block sits (see the file comment).
enum class KvCodeOrder : uint8_t {
  kRows,   // token rows (the CUDA kernels)
  kLanes,  // 64-byte tiles of dot-product lanes (the CPU kernels)
};

inline const char* KvCodeOrderName(KvCodeOrder order) {
  return order == KvCodeOrder::kLanes ? "lanes" : "rows";
}

// Sizes of one head block of a low-bit format.
struct KvPackedLayout {
  int32_t bits = 0;  // 8, 4 or 2
  int32_t block_size = 0;
  int32_t head_dim = 0;
  bool k_per_token = false;
  KvCodeOrder order = KvCodeOrder::kRows;

  int64_t row_bytes() const { return int64_t{head_dim} * bits / 8; }
  int64_t codes_bytes() const { return int64_t{block_size} * row_bytes(); }
  int32_t k_num_params() const { return k_per_token ? block_size : head_dim; }
  int32_t v_num_params() const { return block_size; }
  int64_t k_head_bytes() const { return codes_bytes() + int64_t{4} * k_num_params(); }
  int64_t v_head_bytes() const { return codes_bytes() + int64_t{4} * v_num_params(); }
  int32_t max_code() const { return (1 << bits) - 1; }
  int32_t codes_per_byte() const { return 8 / bits; }
};

// Byte (from the start of the head block) and shift of a code.
struct KvCodePlace {
  int64_t byte;
  int32_t shift;
};

// Where element `i` (channel) of token `slot` of a K (is_v false) or V head block sits.
inline KvCodePlace KvCodePlaceOf(const KvPackedLayout& layout, bool is_v, int32_t slot,
                                 int32_t i) {
  const int32_t bits = layout.bits;
  if (layout.order == KvCodeOrder::kRows) {
    const int64_t row = int64_t{slot} * layout.row_bytes();
    const int32_t chunk = i / kKvPackChunk, j = i % kKvPackChunk;
    switch (bits) {
      case 8: return {row + i, 0};
      case 4: return {row + chunk * 16 + (j & 15), (j >> 4) * 4};
      default: return {row + chunk * 8 + (j & 7), (j >> 3) * 2};
    }
  }
  // kLanes: `lane_item` runs along the 16 lanes, `quad_item` along a lane's planes and bytes;
  // a lane holds 4 * 8 / bits of them (a power of two: shifts, not divisions).
  const int32_t per_lane_log2 = bits == 8 ? 2 : bits == 4 ? 3 : 4;
  const int32_t lane_item = is_v ? i : slot, quad_item = is_v ? slot : i;
  const int32_t quads = (is_v ? layout.block_size : layout.head_dim) >> per_lane_log2;
  const int32_t within = quad_item & ((1 << per_lane_log2) - 1);
  const int64_t tile = int64_t{lane_item >> 4} * quads + (quad_item >> per_lane_log2);
  return {tile * 64 + (lane_item & 15) * 4 + (within & 3), (within >> 2) * bits};
}

inline int32_t KvGetCode(const uint8_t* head_block, const KvPackedLayout& layout, bool is_v,
                         int32_t slot, int32_t i) {
  const KvCodePlace p = KvCodePlaceOf(layout, is_v, slot, i);
  return (head_block[p.byte] >> p.shift) & layout.max_code();
}

inline void KvSetCode(uint8_t* head_block, const KvPackedLayout& layout, bool is_v, int32_t slot,
                      int32_t i, int32_t code) {
  const KvCodePlace p = KvCodePlaceOf(layout, is_v, slot, i);
  const int32_t mask = layout.max_code() << p.shift;
  head_block[p.byte] =
      static_cast<uint8_t>((head_block[p.byte] & ~mask) | ((code << p.shift) & mask));
}

// Scale and zero of one group, as stored (f16 bits).
struct KvGroupParams {
  uint16_t scale;
  uint16_t zero;
};

// The parameters of a group with these extremes. Values beyond the f16 range saturate.
inline KvGroupParams KvChooseParams(float min_value, float max_value, int32_t max_code) {
  auto saturate = [](float x) { return std::fmin(std::fmax(x, -65504.0f), 65504.0f); };
  const uint16_t zero = F32ToFp16(saturate(min_value));
  const float range = saturate(max_value) - Fp16ToF32(zero);
  const float scale = range > 0.0f ? range / static_cast<float>(max_code) : 0.0f;
  return {F32ToFp16(saturate(scale)), zero};
}

// code(x) for a group with `params` (see the file comment).
inline int32_t KvQuantizeValue(float x, KvGroupParams params, int32_t max_code) {
  const float scale = Fp16ToF32(params.scale);
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  const float code = std::rint((x - Fp16ToF32(params.zero)) * inv);
  if (!(code > 0.0f)) return 0;  // negative, zero or NaN
  return code >= static_cast<float>(max_code) ? max_code : static_cast<int32_t>(code);
}

inline float KvDequantizeValue(int32_t code, KvGroupParams params) {
  return static_cast<float>(code) * Fp16ToF32(params.scale) + Fp16ToF32(params.zero);
}

}  // namespace loom
