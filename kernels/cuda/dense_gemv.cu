// Dense-weight GEMV; the contract (math, work split, bytes moved) is in dense_gemv.h.
#include "kernels/cuda/dense_gemv.h"

#include <algorithm>

#include "kernels/cuda/grouped_inl.cuh"
#include "kernels/cuda/mma_inl.cuh"
#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

using internal::LoadF32;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
// 16-byte weight loads each thread has in flight before it uses the first.
constexpr int kLoadsInFlight = 8;

struct GemvParams {
  const float* x;
  int64_t x_stride;
  int32_t num_rows;
  const void* weight;
  int32_t out_features;
  int32_t in_features;
  const float* bias;
  float* y;
  int64_t y_stride;
  // Grouped (DenseGemvGrouped): group blockIdx.y's weights and rows, kDenseGemvMaxRows of them
  // from row blockIdx.z * kDenseGemvMaxRows of the group; null otherwise.
  const int32_t* group_offsets = nullptr;
  const void* const* group_weights = nullptr;
};


// acc[f][r] += dot(w[f][0..V), x[r][e..e + V)) for the block's rows r < num_rows.
template <int V, int F, int R>
__device__ __forceinline__ void Accumulate(const GemvParams& p, int64_t e, const float (&w)[F][V],
                                           float (&acc)[F][R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= p.num_rows) break;
    float xv[V];
    LoadF32<V>(p.x + r * p.x_stride + e, xv);
#pragma unroll
    for (int f = 0; f < F; ++f) {
      float a = acc[f][r];
#pragma unroll
      for (int j = 0; j < V; ++j) a = fmaf(w[f][j], xv[j], a);
      acc[f][r] = a;
    }
  }
}

// W: the weights' element type; V: elements per load (16 bytes' worth, or 1); F: output
// features per block; R: x rows the block's registers hold (num_rows <= R).
template <typename W, int V, int F, int R>
__global__ void __launch_bounds__(kThreads) DenseGemvKernel(GemvParams p) {
  if (!internal::SelectGroup<kDenseGemvMaxRows>(p)) return;
  constexpr int U = kLoadsInFlight / F > 1 ? kLoadsInFlight / F : 1;
  const int64_t first = int64_t{blockIdx.x} * F;
  // Features past the end read the last row (valid memory) and are not written.
  const W* rows[F];
#pragma unroll
  for (int f = 0; f < F; ++f) {
    rows[f] = static_cast<const W*>(p.weight) +
              std::min<int64_t>(first + f, p.out_features - 1) * p.in_features;
  }
  float acc[F][R] = {};
  const int32_t num_vecs = p.in_features / V;
  int32_t v = static_cast<int32_t>(threadIdx.x);
  for (; v + (U - 1) * kThreads < num_vecs; v += U * kThreads) {
    float w[U][F][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int f = 0; f < F; ++f) LoadF32<V>(rows[f] + int64_t{v + u * kThreads} * V, w[u][f]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) Accumulate<V, F, R>(p, int64_t{v + u * kThreads} * V, w[u], acc);
  }
  for (; v < num_vecs; v += kThreads) {
    float w[F][V];
#pragma unroll
    for (int f = 0; f < F; ++f) LoadF32<V>(rows[f] + int64_t{v} * V, w[f]);
    Accumulate<V, F, R>(p, int64_t{v} * V, w, acc);
  }

  __shared__ float partial[kWarps][F * R];
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
#pragma unroll
  for (int f = 0; f < F; ++f) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= p.num_rows) break;
      const float sum = internal::WarpSumOf(acc[f][r]);
      if (lane == 0) partial[warp][f * R + r] = sum;
    }
  }
  __syncthreads();
  if (threadIdx.x < F * R) {
    const int f = static_cast<int>(threadIdx.x) / R;
    const int r = static_cast<int>(threadIdx.x) % R;
    const int64_t o = first + f;
    if (r < p.num_rows && o < p.out_features) {
      float sum = partial[0][threadIdx.x];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) sum += partial[w][threadIdx.x];
      p.y[r * p.y_stride + o] = p.bias != nullptr ? sum + p.bias[o] : sum;
    }
  }
}

template <typename W, int V, int F>
cudaError_t LaunchForRows(const GemvParams& p, cudaStream_t stream, dim3 groups = dim3(1, 1, 1)) {
  const unsigned blocks = static_cast<unsigned>((int64_t{p.out_features} + F - 1) / F);
  if (p.group_offsets != nullptr) {
    const dim3 grid(blocks, groups.y, groups.z);
    DenseGemvKernel<W, V, F, kDenseGemvMaxRows><<<grid, kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }
  if (p.num_rows <= 1) {
    DenseGemvKernel<W, V, F, 1><<<blocks, kThreads, 0, stream>>>(p);
  } else if (p.num_rows <= 2) {
    DenseGemvKernel<W, V, F, 2><<<blocks, kThreads, 0, stream>>>(p);
  } else if (p.num_rows <= 4) {
    DenseGemvKernel<W, V, F, 4><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    DenseGemvKernel<W, V, F, kDenseGemvMaxRows><<<blocks, kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

// ---- DenseGemvMma: the tensor-core variant for 2 to 8 rows ----

constexpr int kMmaWarps = 8;
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kMmaFeatures = 16;  // one m16 tile of output features per block
constexpr int kMmaChunk = 32;     // reduction elements per warp step: two k16 MMAs
constexpr int kMmaUnroll = 4;     // chunks whose weights a warp loads before its first MMA

// x[e .. e + 8) rounded to W's type, as four pairs (the lower element in the low half).
template <typename W>
__device__ __forceinline__ void LoadXPairs(const float* x, uint32_t (&out)[4]) {
  const float4 lo = *reinterpret_cast<const float4*>(x);
  const float4 hi = *reinterpret_cast<const float4*>(x + 4);
  out[0] = internal::PackPairTo<W>(lo.x, lo.y);
  out[1] = internal::PackPairTo<W>(lo.z, lo.w);
  out[2] = internal::PackPairTo<W>(hi.x, hi.y);
  out[3] = internal::PackPairTo<W>(hi.z, hi.w);
}

// Lane (g = lane / 4, c = lane % 4) loads elements [8c, 8c + 8) of each 32-element chunk of
// weight rows g and g + 8 and of x row g, and feeds them to two MMAs with the reduction index
// permuted: MMA column 2c + j is element 8c + j of the chunk and column 2c + 8 + j element
// 8c + 2 + j (the first MMA; the second takes 8c + 4 .. 8c + 7 the same way). A and B use the
// same permutation, so the sum is the plain dot product (mma_inl.cuh has the fragment layouts).
template <typename W>
__device__ __forceinline__ void MmaChunk(const uint4& wa, const uint4& wb, const float* x,
                                         bool has_x, float (&acc)[4]) {
  uint32_t xb[4] = {0, 0, 0, 0};
  if (has_x) LoadXPairs<W>(x, xb);
  const uint32_t a_lo[4] = {wa.x, wb.x, wa.y, wb.y};
  const uint32_t a_hi[4] = {wa.z, wb.z, wa.w, wb.w};
  internal::MmaM16N8K16<W>(acc, a_lo, xb[0], xb[1]);
  internal::MmaM16N8K16<W>(acc, a_hi, xb[2], xb[3]);
}

template <typename W>
__global__ void __launch_bounds__(kMmaThreads) DenseGemvMmaKernel(GemvParams p) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane >> 2, c = lane & 3;
  const int64_t f0 = int64_t{blockIdx.x} * kMmaFeatures;
  const W* weight = static_cast<const W*>(p.weight);
  // Features past the end read the last row (valid memory) and are not written.
  const int64_t last = p.out_features - 1;
  const W* row_a = weight + std::min<int64_t>(f0 + g, last) * p.in_features + 8 * c;
  const W* row_b = weight + std::min<int64_t>(f0 + g + 8, last) * p.in_features + 8 * c;
  const bool has_x = g < p.num_rows;
  const float* x_row = p.x + (has_x ? g : 0) * p.x_stride + 8 * c;
  float acc[4] = {};
  const int32_t num_chunks = p.in_features / kMmaChunk;
  int32_t chunk = warp;
  for (; chunk + (kMmaUnroll - 1) * kMmaWarps < num_chunks; chunk += kMmaUnroll * kMmaWarps) {
    uint4 wa[kMmaUnroll], wb[kMmaUnroll];
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int64_t offset = int64_t{chunk + u * kMmaWarps} * kMmaChunk;
      wa[u] = *reinterpret_cast<const uint4*>(row_a + offset);
      wb[u] = *reinterpret_cast<const uint4*>(row_b + offset);
    }
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int64_t offset = int64_t{chunk + u * kMmaWarps} * kMmaChunk;
      MmaChunk<W>(wa[u], wb[u], x_row + offset, has_x, acc);
    }
  }
  for (; chunk < num_chunks; chunk += kMmaWarps) {
    const int64_t offset = int64_t{chunk} * kMmaChunk;
    MmaChunk<W>(*reinterpret_cast<const uint4*>(row_a + offset),
                *reinterpret_cast<const uint4*>(row_b + offset), x_row + offset, has_x, acc);
  }

  // acc[0..1]: feature g, x rows 2c and 2c + 1; acc[2..3]: feature g + 8, the same rows.
  __shared__ float partial[kMmaWarps][kMmaFeatures][kDenseGemvMaxRows];
  partial[warp][g][2 * c] = acc[0];
  partial[warp][g][2 * c + 1] = acc[1];
  partial[warp][g + 8][2 * c] = acc[2];
  partial[warp][g + 8][2 * c + 1] = acc[3];
  __syncthreads();
  if (threadIdx.x < kMmaFeatures * kDenseGemvMaxRows) {
    const int f = static_cast<int>(threadIdx.x) / kDenseGemvMaxRows;
    const int r = static_cast<int>(threadIdx.x) % kDenseGemvMaxRows;
    const int64_t o = f0 + f;
    if (r < p.num_rows && o < p.out_features) {
      float sum = partial[0][f][r];
#pragma unroll
      for (int w = 1; w < kMmaWarps; ++w) sum += partial[w][f][r];
      p.y[r * p.y_stride + o] = p.bias != nullptr ? sum + p.bias[o] : sum;
    }
  }
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

cudaError_t DenseGemv(const float* x, int64_t x_stride, int32_t num_rows, const void* weight,
                      DType dtype, int32_t out_features, int32_t in_features, const float* bias,
                      float* y, int64_t y_stride, cudaStream_t stream) {
  if (!IsFloatDType(dtype) || num_rows < 0 || num_rows > kDenseGemvMaxRows ||
      out_features < 0 || in_features < 0 || (num_rows > 1 && x_stride < in_features) ||
      (num_rows > 1 && y_stride < out_features)) {
    return cudaErrorInvalidValue;
  }
  if (num_rows == 0 || out_features == 0) return cudaSuccess;
  const GemvParams p{x, x_stride, num_rows, weight, out_features, in_features, bias, y, y_stride};
  const int64_t x_step = num_rows > 1 ? x_stride : 0;
  return internal::DispatchFloatType(dtype, [&](auto tag) {
    using W = typename decltype(tag)::type;
    constexpr int kVec = static_cast<int>(16 / sizeof(W));
    const int vec = internal::PickVecWidth(kVec, {in_features, x_step},
                                           {{weight, sizeof(W)}, {x, sizeof(float)}});
    if (vec != kVec) return LaunchForRows<W, 1, 1>(p, stream);
    // Narrow outputs spread over more blocks, so that every multiprocessor reads some rows.
    if (out_features >= 4096) return LaunchForRows<W, kVec, 4>(p, stream);
    if (out_features >= 1024) return LaunchForRows<W, kVec, 2>(p, stream);
    return LaunchForRows<W, kVec, 1>(p, stream);
  });
}

cudaError_t DenseGemvGrouped(const float* x, int64_t x_stride, const int32_t* group_offsets,
                             int32_t num_groups, int32_t max_group_rows,
                             const void* const* weights, DType dtype, int32_t out_features,
                             int32_t in_features, float* y, int64_t y_stride,
                             cudaStream_t stream) {
  if (!IsFloatDType(dtype) || num_groups < 0 || num_groups > 65535 || max_group_rows < 0 ||
      out_features < 0 || in_features < 0 || x_stride < in_features || y_stride < out_features) {
    return cudaErrorInvalidValue;
  }
  if (num_groups == 0 || max_group_rows == 0 || out_features == 0) return cudaSuccess;
  const int32_t row_chunks = (max_group_rows + kDenseGemvMaxRows - 1) / kDenseGemvMaxRows;
  if (row_chunks > 65535) return cudaErrorInvalidValue;
  GemvParams p{x,       x_stride, kDenseGemvMaxRows, nullptr, out_features, in_features,
               nullptr, y,        y_stride};
  p.group_offsets = group_offsets;
  p.group_weights = weights;
  const dim3 groups(1, static_cast<unsigned>(num_groups), static_cast<unsigned>(row_chunks));
  return internal::DispatchFloatType(dtype, [&](auto tag) {
    using W = typename decltype(tag)::type;
    constexpr int kVec = static_cast<int>(16 / sizeof(W));
    // The weights' alignment is the caller's promise (they are read on the device).
    const int vec = internal::PickVecWidth(kVec, {in_features, x_stride}, {{x, sizeof(float)}});
    if (vec != kVec) return LaunchForRows<W, 1, 1>(p, stream, groups);
    if (out_features >= 4096) return LaunchForRows<W, kVec, 4>(p, stream, groups);
    if (out_features >= 1024) return LaunchForRows<W, kVec, 2>(p, stream, groups);
    return LaunchForRows<W, kVec, 1>(p, stream, groups);
  });
}

cudaError_t DenseGemvMma(const float* x, int64_t x_stride, int32_t num_rows, const void* weight,
                         DType dtype, int32_t out_features, int32_t in_features,
                         const float* bias, float* y, int64_t y_stride, cudaStream_t stream) {
  if ((dtype != DType::kBF16 && dtype != DType::kF16) || num_rows < 0 ||
      num_rows > kDenseGemvMaxRows || out_features < 0 || in_features < 0 ||
      in_features % kMmaChunk != 0 || !Aligned16(weight) || !Aligned16(x) ||
      (num_rows > 1 && (x_stride < in_features || x_stride % 4 != 0 || y_stride < out_features))) {
    return cudaErrorInvalidValue;
  }
  if (num_rows == 0 || out_features == 0) return cudaSuccess;
  const GemvParams p{x, x_stride, num_rows, weight, out_features, in_features, bias, y, y_stride};
  const unsigned blocks =
      static_cast<unsigned>((int64_t{out_features} + kMmaFeatures - 1) / kMmaFeatures);
  if (dtype == DType::kBF16) {
    DenseGemvMmaKernel<__nv_bfloat16><<<blocks, kMmaThreads, 0, stream>>>(p);
  } else {
    DenseGemvMmaKernel<__half><<<blocks, kMmaThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace loom::cuda
