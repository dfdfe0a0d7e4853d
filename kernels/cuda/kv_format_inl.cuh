// Device-side reading and writing of every KV-cache format (kernels/common/kv_format.h,
// kernels/common/attention_args.h): fp8 E4M3 conversions, the low-bit quantizer with the exact
// f32 operations of the host one, and loads of one cached element or of a 32-element chunk of a
// cached row (packed block, bf16 residual tail or an element format). Included by
// kernels/cuda/*.cu only (it holds device code).
//
// Bit-exactness. The quantizer (KvChooseParamsDevice, KvQuantizeDevice) spells every f32 step
// with a round-to-nearest intrinsic (__fsub_rn, __fmul_rn, __fdiv_rn, __frcp_rn), so nvcc cannot
// contract them into FMAs and the codes, scales and zeros equal ref::PackHeadBlock's bit for bit.
// F32ToFp8Device is the host F32ToFp8E4M3 step for step (integer operations plus two exact
// products), so fp8 stores equal ref::WriteKv's too.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/attention_args.h"
#include "kernels/common/kv_format.h"

namespace loom::cuda::internal {

// ---- fp8 E4M3 ----

// f32 -> OCP FP8 E4M3, round to nearest even, saturating to +-448; NaN -> sign | 0x7f. The same
// steps as F32ToFp8E4M3 (kernels/common/dtype.h).
__device__ __forceinline__ uint8_t F32ToFp8Device(float value) {
  const uint32_t bits = __float_as_uint(value);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (abs_bits >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);
  const int32_t exponent = static_cast<int32_t>(abs_bits >> 23) - 127;
  if (exponent < -6) {
    // Subnormal range: multiples of 2^-9; scaling by 512 and taking the fraction are exact.
    const float scaled = __fmul_rn(__uint_as_float(abs_bits), 512.0f);
    uint32_t m = static_cast<uint32_t>(scaled);
    const float rest = __fsub_rn(scaled, static_cast<float>(m));
    if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;
    return static_cast<uint8_t>(sign | m);
  }
  const uint32_t mantissa = abs_bits & 0x7fffffu;
  uint32_t result = (static_cast<uint32_t>(exponent + 7) << 3) | (mantissa >> 20);
  const uint32_t remainder = mantissa & 0xfffffu;
  if (remainder > 0x80000u || (remainder == 0x80000u && (result & 1u))) ++result;
  if (result > 0x7eu) result = 0x7eu;
  return static_cast<uint8_t>(sign | result);
}

// Two fp8 E4M3 codes (`pair` low byte first) -> two f16 values, exact (every E4M3 value is an
// f16 value).
__device__ __forceinline__ uint32_t Fp8PairToHalf2Bits(uint16_t pair) {
  uint32_t out;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(out) : "h"(pair));
  return out;
}

__device__ __forceinline__ float Fp8ToF32Device(uint8_t code) {
  const uint32_t h2 = Fp8PairToHalf2Bits(code);
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h2 & 0xffffu)));
}

__device__ __forceinline__ float Bf16BitsToF32(uint32_t bits) {
  return __uint_as_float(bits << 16);
}
__device__ __forceinline__ float HalfBitsToF32(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

// ---- the low-bit quantizer (KvChooseParams / KvQuantizeValue, kernels/common/kv_format.h) ----

__device__ __forceinline__ float SaturateF16Range(float x) {
  return fminf(fmaxf(x, -65504.0f), 65504.0f);
}

// Scale and zero (f16 bits) of a group with these extremes.
__device__ __forceinline__ KvGroupParams KvChooseParamsDevice(float min_value, float max_value,
                                                              int32_t max_code) {
  const uint16_t zero = __half_as_ushort(__float2half_rn(SaturateF16Range(min_value)));
  const float range = __fsub_rn(SaturateF16Range(max_value), HalfBitsToF32(zero));
  const float scale = range > 0.0f ? __fdiv_rn(range, static_cast<float>(max_code)) : 0.0f;
  return {__half_as_ushort(__float2half_rn(SaturateF16Range(scale))), zero};
}

// The f32 forms of a group's parameters that KvQuantizeDevice needs: zero and 1 / scale.
struct KvQuantParams {
  float zero;
  float inv;
};
__device__ __forceinline__ KvQuantParams KvQuantParamsOf(KvGroupParams params) {
  const float scale = HalfBitsToF32(params.scale);
  return {HalfBitsToF32(params.zero), scale > 0.0f ? __frcp_rn(scale) : 0.0f};
}

__device__ __forceinline__ int32_t KvQuantizeDevice(float x, KvQuantParams p, int32_t max_code) {
  const float code = rintf(__fmul_rn(__fsub_rn(x, p.zero), p.inv));
  if (!(code > 0.0f)) return 0;  // negative, zero or NaN
  return code >= static_cast<float>(max_code) ? max_code : static_cast<int32_t>(code);
}

// ---- reading a cache ----

// The sizes of a PagedKvView its device code needs (PagedKvView's helpers are host functions).
struct KvGeometry {
  int32_t bits;           // 0 for the element formats
  int32_t block_size;
  int32_t head_dim;
  int32_t num_kv_heads;
  int32_t row_bytes;      // packed bytes of one row
  int32_t k_num_params;   // head_dim (K per channel) or block_size (K per token)
  int64_t k_head_bytes;   // one packed head block of K, of V
  int64_t v_head_bytes;
  int64_t head_stride;    // elements between heads / blocks of an element cache
  int64_t block_stride;
  int32_t tail_blocks;    // blocks in a residual tail's ring
  int64_t tail_head_stride;  // bf16 elements between heads / slots of the tails
  int64_t tail_slot_stride;
  bool k_per_token;
};

inline KvGeometry KvGeometryOf(const PagedKvView& cache) {
  KvGeometry g{};
  g.bits = TraitsOf(cache.dtype).kv_code_bits;
  g.block_size = cache.block_size;
  g.head_dim = cache.head_dim;
  g.num_kv_heads = cache.num_kv_heads;
  g.k_per_token = cache.k_per_token;
  g.head_stride = cache.head_stride();
  g.block_stride = cache.block_stride();
  g.tail_blocks = cache.tail_blocks;
  g.tail_head_stride = cache.tail_head_stride();
  g.tail_slot_stride = cache.tail_slot_stride();
  if (g.bits > 0) {
    const KvPackedLayout layout = cache.packed();
    g.row_bytes = static_cast<int32_t>(layout.row_bytes());
    g.k_num_params = layout.k_num_params();
    g.k_head_bytes = layout.k_head_bytes();
    g.v_head_bytes = layout.v_head_bytes();
  }
  return g;
}

// Where one cached row (position `pos` of a sequence, one KV head, K or V) lives. For a packed
// row: its codes, and its group parameters (scales[i], zeros[i] = scales[num_params + i]), with
// the group of element d being `param_base + d * param_step` (per channel: d; per token: slot).
struct KvRowRef {
  enum Kind : int32_t { kElement, kTail, kPacked } kind;
  const uint8_t* row;       // element format: the row's first byte; tail: its first bf16
  const uint16_t* scales;   // packed only
  int32_t num_params;
  int32_t param_base;
  int32_t param_step;
};

// The row of position `pos` (block table `blocks`, sequence length `seq_len`, tail slot
// `tail_slot` and first tail block `tail_first_block`): the blocks KvBlockInTail names are read
// from the tail's ring (kernels/common/kv_format.h), every other one, and any block of a sequence
// without a tail, packed.
__device__ __forceinline__ KvRowRef KvRowOf(const PagedKvView& cache, const KvGeometry& g,
                                            const int32_t* blocks, int32_t seq_len,
                                            int32_t tail_slot, int32_t tail_first_block,
                                            bool is_v, int32_t pos, int32_t kv_head) {
  const int32_t b = pos / g.block_size;
  const int32_t slot = pos - b * g.block_size;
  KvRowRef r{};
  if (g.bits == 0) {
    const int64_t index = int64_t{blocks[b]} * g.block_stride + kv_head * g.head_stride +
                          int64_t{slot} * g.head_dim;
    const size_t elem = cache.dtype == DType::kF32 ? 4 : cache.dtype == DType::kF8E4M3 ? 1 : 2;
    r.kind = KvRowRef::kElement;
    r.row = static_cast<const uint8_t*>(is_v ? cache.v : cache.k) + index * elem;
    return r;
  }
  const int32_t ring = g.tail_blocks;
  if (tail_slot >= 0 && b >= tail_first_block && b >= seq_len / g.block_size - (ring - 1)) {
    // PagedKvView::tail_index, spelled out for the device.
    const int64_t index = int64_t{tail_slot} * g.tail_slot_stride +
                          int64_t{kv_head} * g.tail_head_stride +
                          (int64_t{b % ring} * g.block_size + slot) * g.head_dim;
    r.kind = KvRowRef::kTail;
    r.row = static_cast<const uint8_t*>(is_v ? cache.tail_v : cache.tail_k) + index * 2;
    return r;
  }
  const int64_t head_bytes = is_v ? g.v_head_bytes : g.k_head_bytes;
  const uint8_t* head_block = static_cast<const uint8_t*>(is_v ? cache.v : cache.k) +
                              (int64_t{blocks[b]} * g.num_kv_heads + kv_head) * head_bytes;
  const bool per_token = is_v || g.k_per_token;
  r.kind = KvRowRef::kPacked;
  r.row = head_block + int64_t{slot} * g.row_bytes;
  r.scales = reinterpret_cast<const uint16_t*>(head_block + int64_t{g.block_size} * g.row_bytes);
  r.num_params = is_v ? g.block_size : g.k_num_params;
  r.param_base = per_token ? slot : 0;
  r.param_step = per_token ? 0 : 1;
  return r;
}

// Element d of a row, as f32 (dequantized: code * scale + zero, as ref::UnpackHeadBlockElement).
__device__ __forceinline__ float KvLoadElement(const KvRowRef& r, DType dtype, int32_t bits,
                                               int32_t d) {
  switch (r.kind) {
    case KvRowRef::kTail:
      return Bf16BitsToF32(reinterpret_cast<const uint16_t*>(r.row)[d]);
    case KvRowRef::kPacked: {
      const int32_t chunk = d / kKvPackChunk, j = d % kKvPackChunk;
      int32_t code;
      if (bits == 8) {
        code = r.row[d];
      } else if (bits == 4) {
        code = (r.row[chunk * 16 + (j & 15)] >> ((j >> 4) * 4)) & 0xf;
      } else {
        code = (r.row[chunk * 8 + (j & 7)] >> ((j >> 3) * 2)) & 0x3;
      }
      const int32_t group = r.param_base + d * r.param_step;
      return static_cast<float>(code) * HalfBitsToF32(r.scales[group]) +
             HalfBitsToF32(r.scales[r.num_params + group]);
    }
    default:
      switch (dtype) {
        case DType::kF32: return reinterpret_cast<const float*>(r.row)[d];
        case DType::kBF16: return Bf16BitsToF32(reinterpret_cast<const uint16_t*>(r.row)[d]);
        case DType::kF16: return HalfBitsToF32(reinterpret_cast<const uint16_t*>(r.row)[d]);
        default: return Fp8ToF32Device(r.row[d]);
      }
  }
}

// Codes of elements [32 c, 32 c + 32) of a packed row, in element order, each in a byte of
// `codes` (element i in byte i % 4 of word i / 4). `bits` is a template argument so the unpacking
// is shifts and masks of whole words.
template <int kBits>
__device__ __forceinline__ void KvUnpackChunk(const uint8_t* row, int32_t c, uint32_t (&codes)[8]) {
  if constexpr (kBits == 8) {
    const uint4* src = reinterpret_cast<const uint4*>(row + c * 32);
    const uint4 a = src[0], b = src[1];
    codes[0] = a.x, codes[1] = a.y, codes[2] = a.z, codes[3] = a.w;
    codes[4] = b.x, codes[5] = b.y, codes[6] = b.z, codes[7] = b.w;
  } else if constexpr (kBits == 4) {
    // Byte j holds element j (low nibble) and j + 16 (high nibble).
    const uint4 w = *reinterpret_cast<const uint4*>(row + c * 16);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      codes[k] = words[k] & 0x0f0f0f0fu;
      codes[k + 4] = (words[k] >> 4) & 0x0f0f0f0fu;
    }
  } else {
    static_assert(kBits == 2);
    // Byte j (0..7) holds elements j, j + 8, j + 16, j + 24 in bits 0-1, 2-3, 4-5, 6-7.
    const uint2 w = *reinterpret_cast<const uint2*>(row + c * 8);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      codes[2 * k] = (w.x >> (2 * k)) & 0x03030303u;
      codes[2 * k + 1] = (w.y >> (2 * k)) & 0x03030303u;
    }
  }
}

}  // namespace loom::cuda::internal
