// Embedding lookup; the contract (math, work split, bytes moved) is in embedding.h.
#include "kernels/cuda/embedding.h"

#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

using internal::LoadF32;
using internal::StoreF32;

constexpr int kMaxThreads = 256;

template <typename T, int kVec>
__global__ void EmbeddingKernel(const int32_t* __restrict__ token_ids, int32_t num_tokens,
                                const T* __restrict__ table, int32_t dim,
                                float* __restrict__ out) {
  const int32_t num_vecs = dim / kVec;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const T* src = table + int64_t{token_ids[t]} * dim;
    float* dst = out + t * dim;
    for (int32_t j = threadIdx.x; j < num_vecs; j += blockDim.x) {
      float v[kVec];
      LoadF32(src + j * kVec, v);
      StoreF32(dst + j * kVec, v);
    }
  }
}

}  // namespace

cudaError_t Embedding(const int32_t* token_ids, int32_t num_tokens, const void* table,
                      DType table_dtype, int32_t dim, float* out, cudaStream_t stream) {
  if (num_tokens < 0 || dim < 0) return cudaErrorInvalidValue;
  if (num_tokens == 0 || dim == 0) return IsFloatDType(table_dtype) ? cudaSuccess
                                                                      : cudaErrorInvalidValue;
  return internal::DispatchFloatType(table_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kMaxVec = 16 / sizeof(T);
    const int vec = internal::PickVecWidth(kMaxVec, {dim},
                                           {{table, sizeof(T)}, {out, sizeof(float)}});
    return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      const int threads = internal::ThreadsForItems(dim / kVec, kMaxThreads);
      EmbeddingKernel<T, kVec><<<internal::GridForRows(num_tokens), threads, 0, stream>>>(
          token_ids, num_tokens, static_cast<const T*>(table), dim, out);
      return cudaGetLastError();
    });
  });
}

}  // namespace loom::cuda
