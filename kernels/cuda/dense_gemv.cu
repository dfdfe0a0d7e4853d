// Dense-weight GEMV; the contract (math, work split, bytes moved) is in dense_gemv.h.
#include "kernels/cuda/dense_gemv.h"

#include <algorithm>

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
cudaError_t LaunchForRows(const GemvParams& p, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((int64_t{p.out_features} + F - 1) / F);
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

}  // namespace loom::cuda
