// The physical KV cache: `num_blocks` blocks, each holding `block_size` token slots of K and V
// for every layer and KV head (shared/ARCHITECTURE.md §4).
//
// Layout per layer (kernels/common/attention_args.h): k, v: [num_blocks, num_kv_heads,
// block_size, head_dim] in the pool's dtype, the layers one after another (layer l's K, then its
// V). Blocks are addressed by BlockId; which sequence owns a block is the scheduler's business,
// not the pool's. Host memory (an anonymous mapping) for a backend whose memory is host memory,
// one allocation of the backend's device memory otherwise.
// Thread safety: none; the engine loop owns the pool.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/ids.h"
#include "engine/backend/backend.h"
#include "kernels/common/attention_args.h"

namespace loom {

struct KvPoolShape {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  DType dtype = DType::kBF16;

  // Bytes one block takes across all layers, K and V.
  int64_t BytesPerBlock() const;
};

class KvPool {
 public:
  // Allocates `num_blocks` blocks (zero-filled) in `backend`'s memory; the backend must outlive
  // the pool. Fails cleanly when the memory is not there. With `populate` (host memory), every
  // page is faulted in now (see kv_pool.cc).
  static absl::StatusOr<std::unique_ptr<KvPool>> Create(const KvPoolShape& shape,
                                                        int32_t num_blocks, Backend& backend,
                                                        bool populate = false);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  const KvPoolShape& shape() const { return shape_; }
  int32_t num_blocks() const { return num_blocks_; }
  int64_t total_bytes() const { return total_bytes_; }

  // The cache of one layer, as the attention kernels take it.
  PagedKvView Layer(int32_t layer) const;

  // Copies block `src` to `dst` in every layer (K and V), queued on the backend.
  void CopyBlock(BlockId src, BlockId dst);

 private:
  KvPool(const KvPoolShape& shape, int32_t num_blocks, Backend& backend, void* memory,
         int64_t total_bytes);

  Backend& backend_;
  DeviceBuffer device_memory_;  // empty for host memory (memory_ is then a mapping)
  KvPoolShape shape_;
  int32_t num_blocks_;
  void* memory_;
  int64_t total_bytes_;
  int64_t layer_bytes_;  // K or V of one layer
};

}  // namespace loom
