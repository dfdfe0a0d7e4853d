// KV block copy / gather / scatter; the contract (layouts, work split, bytes moved) is in
// kv_blocks.h.
#include "kernels/cuda/kv_blocks.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

constexpr int kMaxThreads = 256;

enum class Move { kCopy, kGather, kScatter };

// One (item, half) per CTA iteration: `unit` = item * 2 * num_layers + half, which is also the
// staging index of that block.
template <typename V, Move kMove>
__global__ void __launch_bounds__(kMaxThreads)
    KvBlocksKernel(KvBlockLayout layout, const int32_t* __restrict__ ids, int32_t num_items,
                   char* staging) {
  const int32_t num_halves = 2 * layout.num_layers;
  const int64_t num_units = int64_t{num_items} * num_halves;
  const int64_t num_vecs = layout.block_bytes / static_cast<int64_t>(sizeof(V));
  char* pool = static_cast<char*>(layout.base);
  const auto in_pool = [&](int32_t block) { return block >= 0 && block < layout.num_blocks; };
  for (int64_t unit = blockIdx.x; unit < num_units; unit += gridDim.x) {
    const int64_t item = unit / num_halves;
    char* half = pool + (unit - item * num_halves) * layout.half_stride_bytes;
    const char* src;
    char* dst;
    if constexpr (kMove == Move::kCopy) {
      const int32_t from = ids[2 * item], to = ids[2 * item + 1];
      if (!in_pool(from) || !in_pool(to)) continue;  // uniform across the CTA
      src = half + from * layout.block_bytes;
      dst = half + to * layout.block_bytes;
    } else {
      const int32_t block = ids[item];
      if (!in_pool(block)) continue;
      char* in_half = half + block * layout.block_bytes;
      char* in_staging = staging + unit * layout.block_bytes;
      src = kMove == Move::kGather ? in_half : in_staging;
      dst = kMove == Move::kGather ? in_staging : in_half;
    }
    const V* from = reinterpret_cast<const V*>(src);
    V* to = reinterpret_cast<V*>(dst);
    for (int64_t j = threadIdx.x; j < num_vecs; j += blockDim.x) to[j] = from[j];
  }
}

// Widest access in bytes (16, 8, 4, 2, 1) that every block start allows.
int PickAccessBytes(const KvBlockLayout& layout, const void* staging) {
  for (int bytes = 16; bytes > 1; bytes /= 2) {
    if (layout.block_bytes % bytes == 0 && layout.half_stride_bytes % bytes == 0 &&
        reinterpret_cast<uintptr_t>(layout.base) % bytes == 0 &&
        reinterpret_cast<uintptr_t>(staging) % bytes == 0) {
      return bytes;
    }
  }
  return 1;
}

template <Move kMove>
cudaError_t Launch(const KvBlockLayout& layout, const int32_t* ids, int32_t num_items,
                   char* staging, cudaStream_t stream) {
  if (num_items < 0 || layout.num_layers < 1 || layout.num_blocks < 0 || layout.block_bytes < 0 ||
      layout.half_stride_bytes < int64_t{layout.num_blocks} * layout.block_bytes) {
    return cudaErrorInvalidValue;
  }
  if (num_items == 0 || layout.num_blocks == 0 || layout.block_bytes == 0) return cudaSuccess;
  if (layout.base == nullptr || ids == nullptr || (kMove != Move::kCopy && staging == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const int64_t num_units = int64_t{num_items} * 2 * layout.num_layers;
  const int access = PickAccessBytes(layout, kMove == Move::kCopy ? nullptr : staging);
  const int threads = internal::ThreadsForItems(layout.block_bytes / access, kMaxThreads);
  const unsigned grid = internal::GridForRows(num_units);
  switch (access) {
    case 16:
      KvBlocksKernel<uint4, kMove><<<grid, threads, 0, stream>>>(layout, ids, num_items, staging);
      break;
    case 8:
      KvBlocksKernel<uint2, kMove><<<grid, threads, 0, stream>>>(layout, ids, num_items, staging);
      break;
    case 4:
      KvBlocksKernel<uint32_t, kMove>
          <<<grid, threads, 0, stream>>>(layout, ids, num_items, staging);
      break;
    case 2:
      KvBlocksKernel<uint16_t, kMove>
          <<<grid, threads, 0, stream>>>(layout, ids, num_items, staging);
      break;
    default:
      KvBlocksKernel<uint8_t, kMove><<<grid, threads, 0, stream>>>(layout, ids, num_items, staging);
      break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t CopyKvBlocks(const KvBlockLayout& layout, const int32_t* src_dst_pairs,
                         int32_t num_pairs, cudaStream_t stream) {
  return Launch<Move::kCopy>(layout, src_dst_pairs, num_pairs, nullptr, stream);
}

cudaError_t GatherKvBlocks(const KvBlockLayout& layout, const int32_t* block_ids, int32_t num_items,
                           void* staging, cudaStream_t stream) {
  return Launch<Move::kGather>(layout, block_ids, num_items, static_cast<char*>(staging), stream);
}

cudaError_t ScatterKvBlocks(const KvBlockLayout& layout, const int32_t* block_ids,
                            int32_t num_items, const void* staging, cudaStream_t stream) {
  // The kernel only reads the staging buffer when scattering.
  return Launch<Move::kScatter>(layout, block_ids, num_items,
                                const_cast<char*>(static_cast<const char*>(staging)), stream);
}

}  // namespace loom::cuda
