// Shared pieces of the CUDA element-wise kernels; included by kernels/cuda/*.cu only (it holds
// device code, so plain C++ must not include it).
//
// Vector width. Rows of loom's activations are f32 with arbitrary lengths and strides, so a
// kernel cannot assume 16-byte aligned rows. Each launcher picks, on the host, the widest vector
// of N elements (N a power of two) that every row length, stride and base pointer it touches
// allows, and instantiates the kernel for that N; a row of odd length simply runs with N = 1.
// An access of N elements of T moves min(16, N * sizeof(T)) bytes per instruction, so N = 8 of a
// 2-byte type is one 16-byte access and N = 8 of f32 is two.
//
// Conversions round to nearest even, as kernels/common/dtype.h does on the host, so stores of
// bf16/f16 are bit-identical to the reference.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/common/dtype.h"

namespace loom::cuda::internal {

// ---- element conversions (device) ----

__device__ __forceinline__ float ToF32(float x) { return x; }
__device__ __forceinline__ float ToF32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToF32(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T FromF32(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else {
    static_assert(std::is_same_v<T, __half>);
    return __float2half_rn(x);
  }
}

// ---- vector loads and stores (device) ----

// Elements of T moved by one instruction when moving N of them: at most 16 bytes' worth.
template <typename T, int N>
inline constexpr int kChunk = N * sizeof(T) <= 16 ? N : static_cast<int>(16 / sizeof(T));

// The 16-bit pattern of a bf16 or f16 value, and back to f32.
template <typename T>
__device__ __forceinline__ uint32_t Bits16(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    static_assert(std::is_same_v<T, __half>);
    return __half_as_ushort(__float2half_rn(x));
  }
}
template <typename T>
__device__ __forceinline__ float FromBits16(uint32_t bits) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(bits << 16);
  } else {
    static_assert(std::is_same_v<T, __half>);
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
}

// Accesses go through the built-in vector types (float4, uint4, ...). Vector stores use __stwb
// (st.global.wb: the default write-back policy, written as one instruction): a plain store of a
// vector assembled from scalars inside a loop was split into scalar stores by nvcc 13.

// out[0..N) = src[0..N) as f32. src must be aligned to min(16, N * sizeof(T)) bytes.
template <int N, typename T>
__device__ __forceinline__ void LoadF32(const T* src, float (&out)[N]) {
  constexpr int kC = kChunk<T, N>;
#pragma unroll
  for (int c = 0; c < N; c += kC) {
    if constexpr (kC == 1) {
      out[c] = ToF32(src[c]);
    } else if constexpr (sizeof(T) == 4) {
      if constexpr (kC == 4) {
        const float4 v = *reinterpret_cast<const float4*>(src + c);
        out[c] = v.x, out[c + 1] = v.y, out[c + 2] = v.z, out[c + 3] = v.w;
      } else {
        const float2 v = *reinterpret_cast<const float2*>(src + c);
        out[c] = v.x, out[c + 1] = v.y;
      }
    } else {
      uint32_t w[kC / 2];
      if constexpr (kC == 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(src + c);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
      } else if constexpr (kC == 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(src + c);
        w[0] = v.x, w[1] = v.y;
      } else {
        w[0] = *reinterpret_cast<const uint32_t*>(src + c);
      }
#pragma unroll
      for (int k = 0; k < kC / 2; ++k) {
        out[c + 2 * k] = FromBits16<T>(w[k] & 0xffffu);
        out[c + 2 * k + 1] = FromBits16<T>(w[k] >> 16);
      }
    }
  }
}

// dst[0..N) = in[0..N) rounded to T. dst must be aligned to min(16, N * sizeof(T)) bytes.
template <int N, typename T>
__device__ __forceinline__ void StoreF32(T* dst, const float (&in)[N]) {
  constexpr int kC = kChunk<T, N>;
#pragma unroll
  for (int c = 0; c < N; c += kC) {
    if constexpr (kC == 1) {
      dst[c] = FromF32<T>(in[c]);
    } else if constexpr (sizeof(T) == 4) {
      if constexpr (kC == 4) {
        __stwb(reinterpret_cast<float4*>(dst + c),
               make_float4(in[c], in[c + 1], in[c + 2], in[c + 3]));
      } else {
        __stwb(reinterpret_cast<float2*>(dst + c), make_float2(in[c], in[c + 1]));
      }
    } else {
      uint32_t w[kC / 2];
#pragma unroll
      for (int k = 0; k < kC / 2; ++k) {
        w[k] = Bits16<T>(in[c + 2 * k]) | (Bits16<T>(in[c + 2 * k + 1]) << 16);
      }
      if constexpr (kC == 8) {
        __stwb(reinterpret_cast<uint4*>(dst + c), make_uint4(w[0], w[1], w[2], w[3]));
      } else if constexpr (kC == 4) {
        __stwb(reinterpret_cast<uint2*>(dst + c), make_uint2(w[0], w[1]));
      } else {
        *reinterpret_cast<uint32_t*>(dst + c) = w[0];
      }
    }
  }
}

// ---- host-side launch helpers ----

// Most blocks a row-per-block launch asks for; blocks loop over the remaining rows.
inline constexpr int kMaxGridBlocks = 1 << 16;

inline unsigned GridForRows(int64_t num_rows) {
  return static_cast<unsigned>(std::min<int64_t>(num_rows, kMaxGridBlocks));
}

// Threads for a block that walks `items` per row: a multiple of 32 in [32, max_threads].
inline int ThreadsForItems(int64_t items, int max_threads) {
  const int64_t rounded = (items + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(rounded, 32, max_threads));
}

// A buffer a kernel accesses with vectors: its base pointer and element size.
struct VecOperand {
  const void* ptr;
  size_t elem_bytes;
};

// Widest N in {max_vec, max_vec / 2, ..., 1} that divides every length (row lengths, strides,
// offsets in elements) and for which every operand is aligned to min(16, N * elem_bytes).
inline int PickVecWidth(int max_vec, std::initializer_list<int64_t> lengths,
                        std::initializer_list<VecOperand> operands) {
  for (int n = max_vec; n > 1; n /= 2) {
    bool ok = true;
    for (int64_t len : lengths) ok = ok && len % n == 0;
    for (const VecOperand& op : operands) {
      const size_t align = std::min<size_t>(16, n * op.elem_bytes);
      ok = ok && reinterpret_cast<uintptr_t>(op.ptr) % align == 0;
    }
    if (ok) return n;
  }
  return 1;
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with the CUDA type stored for `dtype` (f32, bf16 or f16).
template <typename Fn>
cudaError_t DispatchFloatType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(TypeTag<float>{});
    case DType::kBF16: return fn(TypeTag<__nv_bfloat16>{});
    case DType::kF16: return fn(TypeTag<__half>{});
    default: return cudaErrorInvalidValue;
  }
}

// Calls fn(std::integral_constant<int, N>{}) for vec == N, N a power of two up to kMaxVec (only
// those widths are instantiated).
template <int kMaxVec, typename Fn>
cudaError_t DispatchVecWidth(int vec, Fn&& fn) {
  static_assert(kMaxVec == 1 || kMaxVec == 2 || kMaxVec == 4 || kMaxVec == 8);
  if constexpr (kMaxVec >= 8) {
    if (vec == 8) return fn(std::integral_constant<int, 8>{});
  }
  if constexpr (kMaxVec >= 4) {
    if (vec == 4) return fn(std::integral_constant<int, 4>{});
  }
  if constexpr (kMaxVec >= 2) {
    if (vec == 2) return fn(std::integral_constant<int, 2>{});
  }
  if (vec == 1) return fn(std::integral_constant<int, 1>{});
  return cudaErrorInvalidValue;
}

}  // namespace loom::cuda::internal
