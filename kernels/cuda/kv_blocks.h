// CUDA block moves in the paged KV pool: copy-on-write copies within the pool, and gathers and
// scatters between the pool and a contiguous staging buffer (swap-out / swap-in, migration).
// Each launch moves the listed blocks in every layer, K and V.
//
// Pool layout (engine/kv/kv_pool.cc): one allocation holding, for layer l = 0 .. num_layers - 1,
// that layer's K cache and then its V cache, each [num_blocks, num_kv_heads, block_size,
// head_dim] of the pool dtype (kernels/common/attention_args.h). Call each K or V cache a
// "half"; half h = 2 l + (0 for K, 1 for V). Then block b of half h starts at
//   base + h * half_stride_bytes + b * block_bytes
// with, for a KvPool of shape s and n blocks,
//   block_bytes       = s.num_kv_heads * s.block_size * s.head_dim * DTypeSize(s.dtype)
//   half_stride_bytes = n * block_bytes        (KvPool's layer_bytes_)
//   base              = the pool's memory (PagedKvView k of layer 0).
// MakeKvBlockLayout below builds exactly that.
//
// Staging layout: [num_items, num_layers, 2, block_bytes] bytes, contiguous: item i's block of
// half h at staging + (i * 2 * num_layers + h) * block_bytes.
//
//   CopyKvBlocks:    for each pair i, every half h: pool[h, dst_i] = pool[h, src_i]
//   GatherKvBlocks:  for each item i, every half h: staging[i, h] = pool[h, block_i]
//   ScatterKvBlocks: for each item i, every half h: pool[h, block_i] = staging[i, h]
// A pair or item naming a block outside [0, num_blocks) is skipped (that item's staging bytes
// are left as they were). The items of one launch run concurrently, so no written block may be
// read or written by another item of the same launch: copy destinations distinct and never
// also a source, scatter block ids distinct. (A copy whose source equals its destination is
// allowed and changes nothing.)
//
// Work split: one CTA of 256 threads per (item, half) (CTAs loop past 65536 of them); its threads
// stride over the block's bytes in 16-byte vectors when the base, staging pointer, block_bytes
// and half_stride_bytes are all multiples of 16, else in the widest of 8, 4, 2 or 1 bytes that
// they all allow. Bytes moved: 2 * num_items * 2 * num_layers * block_bytes, plus the ids.
//
// Plain C++ header: every pointer is a device pointer (the staging buffer may also be mapped
// pinned host memory, which the device reads and writes over the bus); the launchers queue one
// kernel on `stream` and return the launch error; they never allocate or synchronise, and are
// CUDA-graph capturable.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace loom::cuda {

struct KvBlockLayout {
  void* base = nullptr;           // half 0 (layer 0's K), block 0
  int32_t num_layers = 0;         // halves: 2 * num_layers
  int32_t num_blocks = 0;         // blocks per half; valid ids are [0, num_blocks)
  int64_t block_bytes = 0;        // bytes of one block in one half
  int64_t half_stride_bytes = 0;  // bytes from one half to the next, >= num_blocks * block_bytes
};

// The layout of a KvPool: `memory` holding `num_blocks` blocks of `block_bytes` per half.
inline KvBlockLayout MakeKvBlockLayout(void* memory, int32_t num_layers, int32_t num_blocks,
                                       int64_t block_bytes) {
  return KvBlockLayout{memory, num_layers, num_blocks, block_bytes,
                       int64_t{num_blocks} * block_bytes};
}

// The three launchers return cudaErrorInvalidValue for a negative count, num_layers < 1,
// num_blocks < 0, block_bytes < 0, half_stride_bytes < num_blocks * block_bytes, or a null
// pointer where a non-empty launch needs one; cudaSuccess without a launch when there is nothing
// to move.

// src_dst_pairs: [num_pairs, 2] i32 (source block, destination block).
cudaError_t CopyKvBlocks(const KvBlockLayout& layout, const int32_t* src_dst_pairs,
                         int32_t num_pairs, cudaStream_t stream);

// block_ids: [num_items] i32; staging: [num_items, num_layers, 2, block_bytes].
cudaError_t GatherKvBlocks(const KvBlockLayout& layout, const int32_t* block_ids, int32_t num_items,
                           void* staging, cudaStream_t stream);

cudaError_t ScatterKvBlocks(const KvBlockLayout& layout, const int32_t* block_ids,
                            int32_t num_items, const void* staging, cudaStream_t stream);

}  // namespace loom::cuda
