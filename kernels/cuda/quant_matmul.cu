// Quantized-weight GEMV and row dequantization; the contract (math, work split, bytes moved) is
// in quant_matmul.h, the block decoding in quant_blocks_inl.cuh.
#include "kernels/cuda/quant_matmul.h"

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/grouped_inl.cuh"
#include "kernels/cuda/quant_blocks_inl.cuh"
#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

using internal::DequantElement;
using internal::DequantGroup;

constexpr int kGroupElems = 32;
// x in shared memory: each group of 32 floats is followed by 4 unused ones, so lane l's float4
// reads (at 36 l + 4 c floats) of one quarter-warp cover all 32 banks once.
constexpr int kGroupStride = 36;
// Shared memory for the staged x: as many groups per chunk (a multiple of 32, one or more per
// lane) as fit, so that a short reduction is staged once and walked without further barriers.
constexpr size_t kMaxStageBytes = 48 << 10;
constexpr int kFeaturesPerWarp = 2;
constexpr int kMaxGemvThreads = 256;

constexpr int kDequantThreads = 256;
constexpr int64_t kMaxDequantBlocks = 8192;

struct GemvParams {
  const float* x;
  int64_t x_stride;
  int32_t num_rows;
  int32_t chunk_groups;  // groups staged per chunk, a multiple of 32
  const uint8_t* weight;
  int64_t row_bytes;
  int32_t out_features;
  int32_t in_features;
  const float* bias;
  float* y;
  int64_t y_stride;
  // Grouped (QuantGemvGrouped): group blockIdx.y's weights and rows, kQuantGemvMaxRows of them
  // from row blockIdx.z * kQuantGemvMaxRows of the group; null otherwise.
  const int32_t* group_offsets;
  const void* const* group_weights;
};

__device__ __forceinline__ float WarpSum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

template <DType F>
__global__ void __launch_bounds__(kMaxGemvThreads) QuantGemvKernel(GemvParams p) {
  if (!internal::SelectGroup<kQuantGemvMaxRows>(p)) return;
  extern __shared__ float4 x_smem[];
  float* xs = reinterpret_cast<float*>(x_smem);
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t first =
      (int64_t{blockIdx.x} * (blockDim.x >> 5) + warp) * kFeaturesPerWarp;
  // Features past the end read the last row (valid memory) and are not written.
  const uint8_t* rows[kFeaturesPerWarp];
#pragma unroll
  for (int f = 0; f < kFeaturesPerWarp; ++f) {
    rows[f] = p.weight + std::min<int64_t>(first + f, p.out_features - 1) * p.row_bytes;
  }
  float acc[kFeaturesPerWarp][kQuantGemvMaxRows] = {};
  const int32_t num_groups = p.in_features / kGroupElems;
  const int32_t x_row_floats = p.chunk_groups * kGroupStride;
  for (int32_t g0 = 0; g0 < num_groups; g0 += p.chunk_groups) {
    const int32_t chunk_groups = min(p.chunk_groups, num_groups - g0);
    const int32_t chunk_elems = chunk_groups * kGroupElems;
    __syncthreads();  // every warp is done with the previous chunk
    for (int32_t i = threadIdx.x; i < p.num_rows * chunk_elems; i += blockDim.x) {
      const int32_t r = i / chunk_elems;
      const int32_t e = i - r * chunk_elems;
      xs[r * x_row_floats + (e >> 5) * kGroupStride + (e & 31)] =
          p.x[r * p.x_stride + int64_t{g0} * kGroupElems + e];
    }
    __syncthreads();
#pragma unroll 2
    for (int32_t g = lane; g < chunk_groups; g += 32) {
      float w[kFeaturesPerWarp][kGroupElems];
#pragma unroll
      for (int f = 0; f < kFeaturesPerWarp; ++f) DequantGroup<F>(rows[f], g0 + g, w[f]);
#pragma unroll
      for (int r = 0; r < kQuantGemvMaxRows; ++r) {
        if (r >= p.num_rows) break;
        const float4* xr =
            reinterpret_cast<const float4*>(xs + r * x_row_floats + g * kGroupStride);
#pragma unroll
        for (int c = 0; c < kGroupElems / 4; ++c) {
          const float4 v = xr[c];
#pragma unroll
          for (int f = 0; f < kFeaturesPerWarp; ++f) {
            float a = acc[f][r];
            a = fmaf(w[f][4 * c], v.x, a);
            a = fmaf(w[f][4 * c + 1], v.y, a);
            a = fmaf(w[f][4 * c + 2], v.z, a);
            a = fmaf(w[f][4 * c + 3], v.w, a);
            acc[f][r] = a;
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kQuantGemvMaxRows; ++r) {
    if (r >= p.num_rows) break;
#pragma unroll
    for (int f = 0; f < kFeaturesPerWarp; ++f) {
      const float sum = WarpSum(acc[f][r]);
      const int64_t o = first + f;
      if (lane == 0 && o < p.out_features) {
        p.y[r * p.y_stride + o] = p.bias != nullptr ? sum + p.bias[o] : sum;
      }
    }
  }
}

// out[t, c] = dequant(weight row (ids ? ids[t] : first_row + t))[c], t * cols + c = i.
template <DType F, typename Out>
__global__ void DequantRowsKernel(const uint8_t* __restrict__ weight, int64_t row_bytes,
                                  const int32_t* __restrict__ ids, int64_t first_row,
                                  int32_t cols, int64_t total, Out* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / cols;
    const int32_t c = static_cast<int32_t>(i - t * cols);
    const int64_t row = ids != nullptr ? int64_t{ids[t]} : first_row + t;
    out[i] = internal::FromF32<Out>(DequantElement<F>(weight + row * row_bytes, c));
  }
}

template <DType F>
using FormatTag = std::integral_constant<DType, F>;

// Calls fn(FormatTag<dtype>{}) for a block-quantized dtype; cudaErrorInvalidValue otherwise.
template <typename Fn>
cudaError_t DispatchQuantFormat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kQ8_0: return fn(FormatTag<DType::kQ8_0>{});
    case DType::kQ4_0: return fn(FormatTag<DType::kQ4_0>{});
    case DType::kQ4_1: return fn(FormatTag<DType::kQ4_1>{});
    case DType::kQ4_K: return fn(FormatTag<DType::kQ4_K>{});
    case DType::kQ5_K: return fn(FormatTag<DType::kQ5_K>{});
    case DType::kQ6_K: return fn(FormatTag<DType::kQ6_K>{});
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchDequantRows(const void* weight, DType dtype, const int32_t* ids,
                              int64_t first_row, int32_t num_rows, int32_t cols, DType out_dtype,
                              void* out, cudaStream_t stream) {
  if (!IsQuantizedDType(dtype) || num_rows < 0 || cols < 0 || first_row < 0 ||
      !RowFitsBlocks(dtype, cols) || (out_dtype != DType::kF32 && out_dtype != DType::kBF16)) {
    return cudaErrorInvalidValue;
  }
  const int64_t total = int64_t{num_rows} * cols;
  if (total == 0) return cudaSuccess;
  const int64_t row_bytes = DTypeRowBytes(dtype, cols);
  const int blocks = static_cast<int>(
      std::clamp<int64_t>((total + kDequantThreads - 1) / kDequantThreads, 1, kMaxDequantBlocks));
  const auto* bytes = static_cast<const uint8_t*>(weight);
  return DispatchQuantFormat(dtype, [&](auto tag) {
    constexpr DType F = decltype(tag)::value;
    if (out_dtype == DType::kF32) {
      DequantRowsKernel<F, float><<<blocks, kDequantThreads, 0, stream>>>(
          bytes, row_bytes, ids, first_row, cols, total, static_cast<float*>(out));
    } else {
      DequantRowsKernel<F, __nv_bfloat16><<<blocks, kDequantThreads, 0, stream>>>(
          bytes, row_bytes, ids, first_row, cols, total, static_cast<__nv_bfloat16*>(out));
    }
    return cudaGetLastError();
  });
}

// Queues QuantGemvKernel for num_rows rows (grouped: at most that many per block) over a grid
// of feature blocks x num_groups x row_chunks (1 x 1 when not grouped).
cudaError_t LaunchQuantGemv(const float* x, int64_t x_stride, int32_t num_rows, const void* weight,
                            const int32_t* group_offsets, const void* const* group_weights,
                            int32_t num_groups, int32_t row_chunks, DType dtype,
                            int32_t out_features, int32_t in_features, const float* bias, float* y,
                            int64_t y_stride, cudaStream_t stream) {
  const int32_t in_groups = in_features / kGroupElems;
  const size_t group_bytes = size_t(num_rows) * kGroupStride * sizeof(float);
  const int32_t fitting = static_cast<int32_t>(kMaxStageBytes / group_bytes) / 32 * 32;
  const int32_t chunk_groups = std::min(fitting, (in_groups + 31) / 32 * 32);
  const GemvParams p{x, x_stride, num_rows, std::max(chunk_groups, 32),
                     static_cast<const uint8_t*>(weight), DTypeRowBytes(dtype, in_features),
                     out_features, in_features, bias, y, y_stride, group_offsets, group_weights};
  // More warps per block when x is wider: its staging is then shared by more features.
  const int warps = num_rows > 2 ? kMaxGemvThreads / 32 : kMaxGemvThreads / 64;
  const int64_t features_per_block = int64_t{warps} * kFeaturesPerWarp;
  const int64_t blocks = (out_features + features_per_block - 1) / features_per_block;
  const size_t smem_bytes = size_t(p.chunk_groups) * group_bytes;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(num_groups),
                  static_cast<unsigned>(row_chunks));
  return DispatchQuantFormat(dtype, [&](auto tag) {
    constexpr DType F = decltype(tag)::value;
    QuantGemvKernel<F><<<grid, warps * 32, smem_bytes, stream>>>(p);
    return cudaGetLastError();
  });
}

}  // namespace

int32_t QuantWeightAlignment(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0: return internal::kQuantAlignment<DType::kQ8_0>;
    case DType::kQ4_0: return internal::kQuantAlignment<DType::kQ4_0>;
    case DType::kQ4_1: return internal::kQuantAlignment<DType::kQ4_1>;
    case DType::kQ4_K: return internal::kQuantAlignment<DType::kQ4_K>;
    case DType::kQ5_K: return internal::kQuantAlignment<DType::kQ5_K>;
    case DType::kQ6_K: return internal::kQuantAlignment<DType::kQ6_K>;
    default: return 0;
  }
}

cudaError_t QuantGemv(const float* x, int64_t x_stride, int32_t num_rows, const void* weight,
                      DType dtype, int32_t out_features, int32_t in_features, const float* bias,
                      float* y, int64_t y_stride, cudaStream_t stream) {
  const int32_t alignment = QuantWeightAlignment(dtype);
  if (alignment == 0 || num_rows < 0 || num_rows > kQuantGemvMaxRows || out_features < 0 ||
      in_features < 0 || !RowFitsBlocks(dtype, in_features) || x_stride < in_features ||
      (num_rows > 1 && y_stride < out_features) ||
      reinterpret_cast<uintptr_t>(weight) % static_cast<uintptr_t>(alignment) != 0) {
    return cudaErrorInvalidValue;
  }
  if (num_rows == 0 || out_features == 0) return cudaSuccess;
  return LaunchQuantGemv(x, x_stride, num_rows, weight, nullptr, nullptr, 1, 1, dtype,
                         out_features, in_features, bias, y, y_stride, stream);
}

cudaError_t QuantGemvGrouped(const float* x, int64_t x_stride, const int32_t* group_offsets,
                             int32_t num_groups, int32_t max_group_rows,
                             const void* const* weights, DType dtype, int32_t out_features,
                             int32_t in_features, float* y, int64_t y_stride,
                             cudaStream_t stream) {
  if (QuantWeightAlignment(dtype) == 0 || num_groups < 0 || num_groups > 65535 ||
      max_group_rows < 0 || out_features < 0 || in_features < 0 ||
      !RowFitsBlocks(dtype, in_features) || x_stride < in_features || y_stride < out_features) {
    return cudaErrorInvalidValue;
  }
  if (num_groups == 0 || max_group_rows == 0 || out_features == 0) return cudaSuccess;
  const int32_t row_chunks = (max_group_rows + kQuantGemvMaxRows - 1) / kQuantGemvMaxRows;
  if (row_chunks > 65535) return cudaErrorInvalidValue;
  return LaunchQuantGemv(x, x_stride, kQuantGemvMaxRows, nullptr, group_offsets, weights,
                         num_groups, row_chunks, dtype, out_features, in_features, nullptr, y,
                         y_stride, stream);
}

cudaError_t DequantizeRows(const void* weight, DType dtype, int64_t first_row, int32_t num_rows,
                           int32_t cols, DType out_dtype, void* out, cudaStream_t stream) {
  return LaunchDequantRows(weight, dtype, nullptr, first_row, num_rows, cols, out_dtype, out,
                           stream);
}

cudaError_t QuantEmbedding(const int32_t* token_ids, int32_t num_tokens, const void* table,
                           DType dtype, int32_t dim, float* out, cudaStream_t stream) {
  return LaunchDequantRows(table, dtype, token_ids, 0, num_tokens, dim, DType::kF32, out, stream);
}

}  // namespace loom::cuda
