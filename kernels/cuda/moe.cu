// Row movement of the mixture-of-experts block; the contract is in moe.h.
#include "kernels/cuda/moe.h"

#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

using internal::LoadF32;
using internal::StoreF32;

constexpr int kMaxThreads = 256;
constexpr int kMaxVec = 4;

template <int kVec>
__global__ void GatherRowsKernel(const float* x, int64_t x_stride, const int32_t* rows,
                                 int32_t num_rows, int32_t dim, float* out) {
  const int32_t num_vecs = dim / kVec;
  for (int64_t r = blockIdx.x; r < num_rows; r += gridDim.x) {
    const float* src = x + int64_t{rows[r]} * x_stride;
    float* dst = out + r * dim;
    for (int32_t j = threadIdx.x; j < num_vecs; j += blockDim.x) {
      float v[kVec];
      LoadF32(src + int64_t{j} * kVec, v);
      StoreF32(dst + int64_t{j} * kVec, v);
    }
  }
}

template <int kVec>
__global__ void MoeInitOutputKernel(const float* shared, const float* gate_logits,
                                    int32_t num_tokens, int32_t dim, float* out) {
  const int32_t num_vecs = dim / kVec;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    float gate = 0.0f;
    if (shared != nullptr) gate = 1.0f / (1.0f + expf(-gate_logits[t]));
    for (int32_t j = threadIdx.x; j < num_vecs; j += blockDim.x) {
      const int64_t col = t * dim + int64_t{j} * kVec;
      float v[kVec];
      if (shared != nullptr) {
        LoadF32(shared + col, v);
#pragma unroll
        for (int i = 0; i < kVec; ++i) v[i] = gate * v[i];
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) v[i] = 0.0f;
      }
      StoreF32(out + col, v);
    }
  }
}

template <int kVec>
__global__ void MoeScatterAddKernel(const float* rows, int32_t num_rows, int32_t dim,
                                    const int32_t* tokens, const float* weights, float* out) {
  const int32_t num_vecs = dim / kVec;
  for (int64_t r = blockIdx.x; r < num_rows; r += gridDim.x) {
    const float* src = rows + r * dim;
    float* dst = out + int64_t{tokens[r]} * dim;
    const float w = weights[r];
    for (int32_t j = threadIdx.x; j < num_vecs; j += blockDim.x) {
      const int64_t col = int64_t{j} * kVec;
      float s[kVec], d[kVec];
      LoadF32(src + col, s);
      LoadF32(dst + col, d);
#pragma unroll
      for (int i = 0; i < kVec; ++i) d[i] = fmaf(w, s[i], d[i]);
      StoreF32(dst + col, d);
    }
  }
}

}  // namespace

cudaError_t GatherRows(const float* x, int64_t x_stride, const int32_t* rows, int32_t num_rows,
                       int32_t dim, float* out, cudaStream_t stream) {
  if (num_rows < 0 || dim < 0 || x_stride < 0) return cudaErrorInvalidValue;
  if (num_rows == 0 || dim == 0) return cudaSuccess;
  const int vec = internal::PickVecWidth(kMaxVec, {dim, x_stride},
                                         {{x, sizeof(float)}, {out, sizeof(float)}});
  return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
    constexpr int kVec = decltype(vec_tag)::value;
    const int threads = internal::ThreadsForItems(dim / kVec, kMaxThreads);
    GatherRowsKernel<kVec><<<internal::GridForRows(num_rows), threads, 0, stream>>>(
        x, x_stride, rows, num_rows, dim, out);
    return cudaGetLastError();
  });
}

cudaError_t MoeInitOutput(const float* shared, const float* gate_logits, int32_t num_tokens,
                          int32_t dim, float* out, cudaStream_t stream) {
  if (num_tokens < 0 || dim < 0) return cudaErrorInvalidValue;
  if ((shared == nullptr) != (gate_logits == nullptr)) return cudaErrorInvalidValue;
  if (num_tokens == 0 || dim == 0) return cudaSuccess;
  const int vec = internal::PickVecWidth(kMaxVec, {dim},
                                         {{shared, sizeof(float)}, {out, sizeof(float)}});
  return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
    constexpr int kVec = decltype(vec_tag)::value;
    const int threads = internal::ThreadsForItems(dim / kVec, kMaxThreads);
    MoeInitOutputKernel<kVec><<<internal::GridForRows(num_tokens), threads, 0, stream>>>(
        shared, gate_logits, num_tokens, dim, out);
    return cudaGetLastError();
  });
}

cudaError_t MoeScatterAdd(const float* rows, int32_t num_rows, int32_t dim, const int32_t* tokens,
                          const float* weights, float* out, cudaStream_t stream) {
  if (num_rows < 0 || dim < 0) return cudaErrorInvalidValue;
  if (num_rows == 0 || dim == 0) return cudaSuccess;
  const int vec = internal::PickVecWidth(kMaxVec, {dim},
                                         {{rows, sizeof(float)}, {out, sizeof(float)}});
  return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
    constexpr int kVec = decltype(vec_tag)::value;
    const int threads = internal::ThreadsForItems(dim / kVec, kMaxThreads);
    MoeScatterAddKernel<kVec><<<internal::GridForRows(num_rows), threads, 0, stream>>>(
        rows, num_rows, dim, tokens, weights, out);
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda
