// Rotary position embedding; the contract (math, work split, bytes moved) is in rope.h.
#include "kernels/cuda/rope.h"

#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

using internal::LoadF32;
using internal::StoreF32;

constexpr int kMaxThreads = 256;
constexpr int kMaxVec = 4;

struct RopeArgs {
  float* x = nullptr;
  int64_t x_stride = 0;
  int32_t num_tokens = 0;
  int32_t num_heads = 0;
  int32_t head_dim = 0;
  int32_t half = 0;  // rotary_dim / 2
  const float* cos = nullptr;
  const float* sin = nullptr;
};

template <int kVec>
__global__ void RopeKernel(RopeArgs a) {
  const int32_t vecs_per_head = a.half / kVec;
  const int32_t items = a.num_heads * vecs_per_head;
  for (int64_t t = blockIdx.x; t < a.num_tokens; t += gridDim.x) {
    float* row = a.x + t * a.x_stride;
    const float* cos_row = a.cos + t * a.half;
    const float* sin_row = a.sin + t * a.half;
    for (int32_t j = threadIdx.x; j < items; j += blockDim.x) {
      const int32_t head = j / vecs_per_head;
      const int32_t i = (j - head * vecs_per_head) * kVec;
      float* lo_ptr = row + int64_t{head} * a.head_dim + i;
      float lo[kVec], hi[kVec], c[kVec], s[kVec];
      LoadF32(lo_ptr, lo);
      LoadF32(lo_ptr + a.half, hi);
      LoadF32(cos_row + i, c);
      LoadF32(sin_row + i, s);
      float new_lo[kVec], new_hi[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        new_lo[k] = lo[k] * c[k] - hi[k] * s[k];
        new_hi[k] = hi[k] * c[k] + lo[k] * s[k];
      }
      StoreF32(lo_ptr, new_lo);
      StoreF32(lo_ptr + a.half, new_hi);
    }
  }
}

}  // namespace

cudaError_t Rope(float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads,
                 int32_t head_dim, int32_t rotary_dim, const float* cos, const float* sin,
                 cudaStream_t stream) {
  if (num_tokens < 0 || num_heads < 0 || head_dim < 0 || rotary_dim < 0 ||
      rotary_dim > head_dim) {
    return cudaErrorInvalidValue;
  }
  RopeArgs a{x, x_stride, num_tokens, num_heads, head_dim, rotary_dim / 2, cos, sin};
  if (num_tokens == 0 || num_heads == 0 || a.half == 0) return cudaSuccess;
  const int vec = internal::PickVecWidth(
      kMaxVec, {a.half, head_dim, x_stride},
      {{x, sizeof(float)}, {cos, sizeof(float)}, {sin, sizeof(float)}});
  return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
    constexpr int kVec = decltype(vec_tag)::value;
    const int64_t items = int64_t{num_heads} * (a.half / kVec);
    const int threads = internal::ThreadsForItems(items, kMaxThreads);
    RopeKernel<kVec><<<internal::GridForRows(num_tokens), threads, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda
