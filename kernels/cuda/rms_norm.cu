// RMSNorm and residual-add + RMSNorm; the contract (math, work split, bytes moved) is in
// rms_norm.h. Both ops share one kernel, specialised on whether the residual add runs, so the
// add costs no extra pass over memory.
#include "kernels/cuda/rms_norm.h"

#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

using internal::LoadF32;
using internal::StoreF32;

constexpr int kMaxThreads = 1024;
constexpr int kMaxVec = 4;
// Vectors each thread keeps in registers between the two passes (indexed only by unrolled loop
// counters, so they stay in registers).
constexpr int kCachedVecs = 4;

struct NormArgs {
  const float* x = nullptr;  // RmsNorm: input; AddRmsNorm: the residual before the add
  int64_t x_stride = 0;
  float* residual = nullptr;     // AddRmsNorm: where x + delta goes (the same memory as x)
  const float* delta = nullptr;  // AddRmsNorm only; row stride x_stride
  const void* weight = nullptr;
  int32_t num_rows = 0;
  int32_t dim = 0;
  float eps = 0.0f;
  float* out = nullptr;
  int64_t out_stride = 0;
};

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of v over the block, returned to every thread. blockDim.x is a multiple of 32.
__device__ float BlockSum(float v) {
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = WarpSum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  // Every warp reduces the per-warp sums itself: no second broadcast through shared memory.
  v = lane < static_cast<int>(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
  v = WarpSum(v);
  __syncthreads();  // warp_sums is reused by the next row
  return v;
}

template <int kVec>
__device__ __forceinline__ float SumSquares(const float (&v)[kVec]) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) s += v[i] * v[i];
  return s;
}

// Vector j of row r: x, or (AddRmsNorm) x + delta, which is also stored back to the residual.
template <int kVec, bool kAdd>
__device__ __forceinline__ void LoadRowVec(const NormArgs& a, int64_t r, int32_t j,
                                           float (&v)[kVec]) {
  const int64_t offset = r * a.x_stride + int64_t{j} * kVec;
  LoadF32(a.x + offset, v);
  if constexpr (kAdd) {
    float d[kVec];
    LoadF32(a.delta + offset, d);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] += d[i];
    StoreF32(a.residual + offset, v);
  }
}

// out[r, vector j] = v * inv_rms * weight[vector j], in the reference's order of operations.
template <int kVec, typename W>
__device__ __forceinline__ void StoreNormed(const NormArgs& a, int64_t r, int32_t j,
                                            const float (&v)[kVec], float inv_rms) {
  float w[kVec];
  LoadF32(static_cast<const W*>(a.weight) + int64_t{j} * kVec, w);
  float o[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) o[i] = v[i] * inv_rms * w[i];
  StoreF32(a.out + r * a.out_stride + int64_t{j} * kVec, o);
}

template <int kVec, typename W, bool kAdd>
__global__ void __launch_bounds__(kMaxThreads) RmsNormKernel(NormArgs a) {
  const int32_t num_vecs = a.dim / kVec;
  const int32_t first_uncached = kCachedVecs * blockDim.x;
  for (int64_t r = blockIdx.x; r < a.num_rows; r += gridDim.x) {
    float cached[kCachedVecs][kVec];
    float sum_sq = 0.0f;
#pragma unroll
    for (int c = 0; c < kCachedVecs; ++c) {
      const int32_t j = threadIdx.x + c * blockDim.x;
      if (j < num_vecs) {
        LoadRowVec<kVec, kAdd>(a, r, j, cached[c]);
        sum_sq += SumSquares(cached[c]);
      }
    }
    for (int32_t j = first_uncached + threadIdx.x; j < num_vecs; j += blockDim.x) {
      float v[kVec];
      LoadRowVec<kVec, kAdd>(a, r, j, v);
      sum_sq += SumSquares(v);
    }
    const float inv_rms = rsqrtf(BlockSum(sum_sq) / static_cast<float>(a.dim) + a.eps);
#pragma unroll
    for (int c = 0; c < kCachedVecs; ++c) {
      const int32_t j = threadIdx.x + c * blockDim.x;
      if (j < num_vecs) StoreNormed<kVec, W>(a, r, j, cached[c], inv_rms);
    }
    for (int32_t j = first_uncached + threadIdx.x; j < num_vecs; j += blockDim.x) {
      float v[kVec];  // this thread wrote the residual here in pass 1 (AddRmsNorm)
      LoadF32(a.x + r * a.x_stride + int64_t{j} * kVec, v);
      StoreNormed<kVec, W>(a, r, j, v, inv_rms);
    }
  }
}

template <bool kAdd>
cudaError_t LaunchRmsNorm(const NormArgs& a, DType weight_dtype, cudaStream_t stream) {
  if (a.num_rows < 0 || a.dim < 0 || !IsFloatDType(weight_dtype)) return cudaErrorInvalidValue;
  if (a.num_rows == 0 || a.dim == 0) return cudaSuccess;
  return internal::DispatchFloatType(weight_dtype, [&](auto tag) {
    using W = typename decltype(tag)::type;
    const int vec = internal::PickVecWidth(
        kMaxVec, {a.dim, a.x_stride, a.out_stride},
        {{a.x, sizeof(float)}, {a.delta, sizeof(float)}, {a.out, sizeof(float)},
         {a.weight, sizeof(W)}});
    return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      const int64_t vecs_per_thread = (a.dim / kVec + kCachedVecs - 1) / kCachedVecs;
      const int threads = internal::ThreadsForItems(vecs_per_thread, kMaxThreads);
      RmsNormKernel<kVec, W, kAdd>
          <<<internal::GridForRows(a.num_rows), threads, 0, stream>>>(a);
      return cudaGetLastError();
    });
  });
}

}  // namespace

cudaError_t RmsNorm(const float* x, int64_t x_stride, int32_t num_rows, int32_t dim,
                    const void* weight, DType weight_dtype, float eps, float* out,
                    int64_t out_stride, cudaStream_t stream) {
  NormArgs a;
  a.x = x;
  a.x_stride = x_stride;
  a.weight = weight;
  a.num_rows = num_rows;
  a.dim = dim;
  a.eps = eps;
  a.out = out;
  a.out_stride = out_stride;
  return LaunchRmsNorm</*kAdd=*/false>(a, weight_dtype, stream);
}

cudaError_t AddRmsNorm(float* residual, const float* delta, int32_t num_rows, int32_t dim,
                       const void* weight, DType weight_dtype, float eps, float* out,
                       cudaStream_t stream) {
  NormArgs a;
  a.x = residual;
  a.x_stride = dim;
  a.residual = residual;
  a.delta = delta;
  a.weight = weight;
  a.num_rows = num_rows;
  a.dim = dim;
  a.eps = eps;
  a.out = out;
  a.out_stride = dim;
  return LaunchRmsNorm</*kAdd=*/true>(a, weight_dtype, stream);
}

}  // namespace loom::cuda
