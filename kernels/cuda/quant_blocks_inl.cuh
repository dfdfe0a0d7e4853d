// Device-side decoding of the block-quantized weight formats (layouts in kernels/ref/quant_ref.h);
// included by kernels/cuda/*.cu only (it holds device code, so plain C++ must not include it).
//
// Two shapes of the same decoding, each tested against ref::DequantizeRow:
//   DequantElement<F>(row, c)   element c of a row, from byte loads (any alignment). Computed in
//                               the reference's order with explicitly rounded operations (no
//                               fused multiply-add), so the value is bit-identical to it.
//   DequantGroup<F>(row, g, w)  the 32 elements [32 g, 32 g + 32) of a row into registers, from
//                               the widest loads QuantAlignment<F> allows; fused multiply-adds
//                               allowed (it feeds an f32 dot product, not a stored value).
// A "group" is a q8_0/q4_0/q4_1 block, or one 32-element sub-block of a q4_k/q5_k/q6_k
// super-block (sub-block j = g % 8 of super-block g / 8).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/dtype.h"

namespace loom::cuda::internal {

// Bytes every row start of a weight in format F is aligned to when the base pointer is: the
// largest of 16/4/2 that divides the block size (and so every row size), capped by what the
// group loads below use.
template <DType F>
inline constexpr int kQuantAlignment =
    (F == DType::kQ4_K || F == DType::kQ5_K) ? 16 : (F == DType::kQ4_1 ? 4 : 2);

__device__ __forceinline__ float HalfBitsToF32(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
}

// A little-endian half at p, any alignment.
__device__ __forceinline__ float LoadHalfBytes(const uint8_t* p) {
  return HalfBitsToF32(uint32_t{p[0]} | (uint32_t{p[1]} << 8));
}

// ---- one element (byte loads) ----

template <bool kFive>
__device__ __forceinline__ float DequantElementK45(const uint8_t* row, int32_t c) {
  constexpr int kBlockBytes = kFive ? 176 : 144;
  const uint8_t* b = row + static_cast<int64_t>(c >> 8) * kBlockBytes;
  const int e = c & 255, j = e >> 5, l = e & 31;
  const uint8_t* scales = b + 4;
  uint32_t sc, mn;
  if (j < 4) {
    sc = scales[j] & 63u;
    mn = scales[j + 4] & 63u;
  } else {
    sc = (scales[j + 4] & 15u) | ((scales[j - 4] >> 6) << 4);
    mn = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
  const uint8_t* qs = b + (kFive ? 48 : 16);
  int q = (qs[32 * (j >> 1) + l] >> (4 * (j & 1))) & 15;
  if (kFive && ((b[16 + l] >> j) & 1)) q += 16;
  const float dj = __fmul_rn(LoadHalfBytes(b), static_cast<float>(sc));
  const float mj = __fmul_rn(LoadHalfBytes(b + 2), static_cast<float>(mn));
  return __fsub_rn(__fmul_rn(dj, static_cast<float>(q)), mj);
}

template <DType F>
__device__ __forceinline__ float DequantElement(const uint8_t* row, int32_t c) {
  if constexpr (F == DType::kQ8_0) {
    const uint8_t* b = row + static_cast<int64_t>(c >> 5) * 34;
    return __fmul_rn(LoadHalfBytes(b), static_cast<float>(static_cast<int8_t>(b[2 + (c & 31)])));
  } else if constexpr (F == DType::kQ4_0 || F == DType::kQ4_1) {
    constexpr int kHead = F == DType::kQ4_0 ? 2 : 4;
    const uint8_t* b = row + static_cast<int64_t>(c >> 5) * (kHead + 16);
    const int i = c & 31;
    const int q = i < 16 ? (b[kHead + i] & 15) : (b[kHead + i - 16] >> 4);
    if constexpr (F == DType::kQ4_0) {
      return __fmul_rn(LoadHalfBytes(b), static_cast<float>(q - 8));
    } else {
      return __fadd_rn(__fmul_rn(LoadHalfBytes(b), static_cast<float>(q)), LoadHalfBytes(b + 2));
    }
  } else if constexpr (F == DType::kQ4_K || F == DType::kQ5_K) {
    return DequantElementK45<F == DType::kQ5_K>(row, c);
  } else {
    static_assert(F == DType::kQ6_K);
    const uint8_t* b = row + static_cast<int64_t>(c >> 8) * 210;
    const int e = c & 255, h = e >> 7, g = (e >> 5) & 3, l = e & 31;
    const int low = (b[64 * h + l + 32 * (g & 1)] >> (4 * (g >> 1))) & 15;
    const int high = (b[128 + 32 * h + l] >> (2 * g)) & 3;
    const int q = (low | (high << 4)) - 32;
    const float scale = static_cast<float>(static_cast<int8_t>(b[192 + 8 * h + 2 * g + l / 16]));
    return __fmul_rn(__fmul_rn(LoadHalfBytes(b + 208), scale), static_cast<float>(q));
  }
}

// ---- 32 elements (vector loads) ----

// kBytes (a multiple of 4) at p, which is aligned to kAlign bytes, as little-endian words.
template <int kBytes, int kAlign>
__device__ __forceinline__ void LoadWords(const uint8_t* p, uint32_t (&words)[kBytes / 4]) {
  if constexpr (kAlign >= 16 && kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      words[4 * i] = v.x;
      words[4 * i + 1] = v.y;
      words[4 * i + 2] = v.z;
      words[4 * i + 3] = v.w;
    }
  } else if constexpr (kAlign >= 4) {
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) words[i] = __ldg(reinterpret_cast<const uint32_t*>(p) + i);
  } else {
    const auto* halves = reinterpret_cast<const unsigned short*>(p);
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) {
      words[i] = uint32_t{__ldg(halves + 2 * i)} | (uint32_t{__ldg(halves + 2 * i + 1)} << 16);
    }
  }
}

// Byte i (a compile-time constant after unrolling) of a word array.
template <int N>
__device__ __forceinline__ uint32_t ByteOf(const uint32_t (&words)[N], int i) {
  return (words[i >> 2] >> (8 * (i & 3))) & 0xffu;
}

__device__ __forceinline__ float LoadHalfAligned(const uint8_t* p) {
  return HalfBitsToF32(__ldg(reinterpret_cast<const unsigned short*>(p)));
}

template <bool kFive>
__device__ __forceinline__ void DequantGroupK45(const uint8_t* row, int32_t g, float (&w)[32]) {
  constexpr int kBlockBytes = kFive ? 176 : 144;
  const uint8_t* b = row + static_cast<int64_t>(g >> 3) * kBlockBytes;
  const int j = g & 7;
  uint32_t head[4];  // d, dmin; scales[0..11]
  LoadWords<16, 16>(b, head);
  // scales[j & 3], scales[4 + (j & 3)], scales[8 + (j & 3)] (ScaleMinK4 in quant_ref.cc).
  const int shift = 8 * (j & 3);
  const uint32_t s0 = (head[1] >> shift) & 0xffu;
  const uint32_t s1 = (head[2] >> shift) & 0xffu;
  const uint32_t s2 = (head[3] >> shift) & 0xffu;
  const uint32_t sc = j < 4 ? (s0 & 63u) : ((s2 & 15u) | ((s0 >> 6) << 4));
  const uint32_t mn = j < 4 ? (s1 & 63u) : ((s2 >> 4) | ((s1 >> 6) << 4));
  const float dj = HalfBitsToF32(head[0]) * static_cast<float>(sc);
  const float mj = HalfBitsToF32(head[0] >> 16) * static_cast<float>(mn);
  uint32_t qs[8];
  LoadWords<32, 16>(b + (kFive ? 48 : 16) + 32 * (j >> 1), qs);
  const int nibble = 4 * (j & 1);
  if constexpr (kFive) {
    uint32_t qh[8];
    LoadWords<32, 16>(b + 16, qh);
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const uint32_t q = ((ByteOf(qs, l) >> nibble) & 15u) | (((ByteOf(qh, l) >> j) & 1u) << 4);
      w[l] = dj * static_cast<float>(q) - mj;
    }
  } else {
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      w[l] = dj * static_cast<float>((ByteOf(qs, l) >> nibble) & 15u) - mj;
    }
  }
}

template <DType F>
__device__ __forceinline__ void DequantGroup(const uint8_t* row, int32_t g, float (&w)[32]) {
  if constexpr (F == DType::kQ8_0) {
    const uint8_t* b = row + static_cast<int64_t>(g) * 34;
    const float d = LoadHalfAligned(b);
    uint32_t qs[8];
    LoadWords<32, 2>(b + 2, qs);
#pragma unroll
    for (int i = 0; i < 32; ++i) w[i] = d * static_cast<float>(static_cast<int8_t>(ByteOf(qs, i)));
  } else if constexpr (F == DType::kQ4_0) {
    const uint8_t* b = row + static_cast<int64_t>(g) * 18;
    const float d = LoadHalfAligned(b);
    uint32_t qs[4];
    LoadWords<16, 2>(b + 2, qs);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      w[i] = d * static_cast<float>(static_cast<int>(ByteOf(qs, i) & 15u) - 8);
      w[i + 16] = d * static_cast<float>(static_cast<int>(ByteOf(qs, i) >> 4) - 8);
    }
  } else if constexpr (F == DType::kQ4_1) {
    const uint8_t* b = row + static_cast<int64_t>(g) * 20;
    const uint32_t dm = __ldg(reinterpret_cast<const uint32_t*>(b));
    const float d = HalfBitsToF32(dm), m = HalfBitsToF32(dm >> 16);
    uint32_t qs[4];
    LoadWords<16, 4>(b + 4, qs);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      w[i] = d * static_cast<float>(ByteOf(qs, i) & 15u) + m;
      w[i + 16] = d * static_cast<float>(ByteOf(qs, i) >> 4) + m;
    }
  } else if constexpr (F == DType::kQ4_K || F == DType::kQ5_K) {
    DequantGroupK45<F == DType::kQ5_K>(row, g, w);
  } else {
    static_assert(F == DType::kQ6_K);
    const uint8_t* b = row + static_cast<int64_t>(g >> 3) * 210;
    const int j = g & 7, h = j >> 2, sub = j & 3;
    uint32_t ql[8], qh[8];
    LoadWords<32, 2>(b + 64 * h + 32 * (sub & 1), ql);
    LoadWords<32, 2>(b + 128 + 32 * h, qh);
    const uint32_t scales =
        __ldg(reinterpret_cast<const unsigned short*>(b + 192 + 8 * h + 2 * sub));
    const float d = LoadHalfAligned(b + 208);
    const float d0 = d * static_cast<float>(static_cast<int8_t>(scales & 0xffu));
    const float d1 = d * static_cast<float>(static_cast<int8_t>(scales >> 8));
    const int low_shift = 4 * (sub >> 1), high_shift = 2 * sub;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int q = static_cast<int>(((ByteOf(ql, l) >> low_shift) & 15u) |
                                     (((ByteOf(qh, l) >> high_shift) & 3u) << 4)) - 32;
      w[l] = (l < 16 ? d0 : d1) * static_cast<float>(q);
    }
  }
}

}  // namespace loom::cuda::internal
