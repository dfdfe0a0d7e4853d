// Tensor-core building blocks of the attention kernels: shared-memory swizzle, ldmatrix,
// mma.m16n8k16 (bf16 / f16 inputs, f32 accumulators), packing of f32 pairs and the quad / warp
// reductions of the softmax. Included by kernels/cuda/*.cu only (it holds device code).
//
// Fragment layouts (PTX mma.m16n8k16 .row.col; g = lane / 4, c = lane % 4):
//   A (16x16): a[0] = (g, 2c..2c+1), a[1] = (g + 8, 2c..2c+1), a[2] = (g, 2c+8..2c+9),
//              a[3] = (g + 8, 2c+8..2c+9)   (row, columns; the lower column in the low half)
//   B (16x8):  b[0] = (k 2c..2c+1, n g), b[1] = (k 2c + 8.., n g)
//   C (16x8):  c[0..1] = (g, 2c..2c+1), c[2..3] = (g + 8, 2c..2c+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace loom::cuda::internal {

// Element offset of 16-byte unit `unit` of row `row` in a [rows, D] tile of 2-byte elements: the
// unit index is XORed with row % 8, so the 8 rows an ldmatrix phase reads hit 8 different bank
// groups (a row is a multiple of 128 bytes).
template <int D>
__device__ __forceinline__ int SwizzledOffset(int row, int unit) {
  return row * D + ((unit ^ (row & 7)) << 3);
}

__device__ __forceinline__ uint32_t SharedAddress(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d += a * b for one m16n8k16 tile, f32 accumulation.
template <typename T>
__device__ __forceinline__ void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __half>);
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two f32 rounded to T, `lo` in the low half (the lower column of an mma fragment).
template <typename T>
__device__ __forceinline__ uint32_t PackPairTo(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

__device__ __forceinline__ float QuadMaxOf(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float QuadSumOf(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float WarpMaxOf(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}
__device__ __forceinline__ float WarpSumOf(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

}  // namespace loom::cuda::internal
