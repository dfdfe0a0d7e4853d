// K/V store into the paged cache; the contract (math, work split, bytes moved) is in kv_write.h.
#include "kernels/cuda/kv_write.h"

#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

using internal::LoadF32;
using internal::StoreF32;

constexpr int kMaxThreads = 256;
constexpr int kMaxVec = 8;

template <typename C, int kVec>
__global__ void WriteKvKernel(KvWriteArgs a) {
  const PagedKvView& cache = a.cache;
  const int32_t vecs_per_head = cache.head_dim / kVec;
  const int32_t items = cache.num_kv_heads * vecs_per_head;
  const int64_t num_slots = int64_t{cache.num_blocks} * cache.block_size;
  // PagedKvView's stride helpers are host functions; the same products here.
  const int64_t head_stride = int64_t{cache.block_size} * cache.head_dim;
  const int64_t block_stride = cache.num_kv_heads * head_stride;
  C* k_cache = static_cast<C*>(cache.k);
  C* v_cache = static_cast<C*>(cache.v);
  for (int64_t t = blockIdx.x; t < a.num_tokens; t += gridDim.x) {
    const int32_t slot = a.slot_mapping[t];
    if (slot < 0 || slot >= num_slots) continue;  // uniform across the block
    const int64_t slot_base = int64_t{slot / cache.block_size} * block_stride +
                              int64_t{slot % cache.block_size} * cache.head_dim;
    for (int32_t j = threadIdx.x; j < items; j += blockDim.x) {
      const int32_t head = j / vecs_per_head;
      const int32_t d = (j - head * vecs_per_head) * kVec;
      const int64_t src = int64_t{head} * cache.head_dim + d;
      const int64_t dst = slot_base + int64_t{head} * head_stride + d;
      float k[kVec], v[kVec];
      LoadF32(a.k + t * a.k_stride + src, k);
      LoadF32(a.v + t * a.v_stride + src, v);
      StoreF32(k_cache + dst, k);
      StoreF32(v_cache + dst, v);
    }
  }
}

}  // namespace

cudaError_t WriteKv(const KvWriteArgs& args, cudaStream_t stream) {
  const PagedKvView& cache = args.cache;
  if (args.num_tokens < 0 || cache.num_blocks < 0 || cache.num_kv_heads < 0 ||
      cache.block_size < 1 || cache.head_dim < 0 || !IsFloatDType(cache.dtype)) {
    return cudaErrorInvalidValue;
  }
  if (args.num_tokens == 0 || cache.num_kv_heads == 0 || cache.head_dim == 0) return cudaSuccess;
  return internal::DispatchFloatType(cache.dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    const int vec = internal::PickVecWidth(
        kMaxVec, {cache.head_dim, args.k_stride, args.v_stride},
        {{args.k, sizeof(float)}, {args.v, sizeof(float)}, {cache.k, sizeof(C)},
         {cache.v, sizeof(C)}});
    return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      const int64_t items = int64_t{cache.num_kv_heads} * (cache.head_dim / kVec);
      const int threads = internal::ThreadsForItems(items, kMaxThreads);
      WriteKvKernel<C, kVec><<<internal::GridForRows(args.num_tokens), threads, 0, stream>>>(args);
      return cudaGetLastError();
    });
  });
}

}  // namespace loom::cuda
