// The physical KV cache: `num_blocks` blocks, each holding `block_size` token slots of K and V
// for every layer and KV head (shared/ARCHITECTURE.md §4).
//
// Layout per layer (kernels/common/attention_args.h): k, v: [num_blocks, num_kv_heads,
// block_size, head_dim] in the pool's dtype, the layers one after another (layer l's K, then its
// V). Low-bit formats (kernels/common/kv_format.h) store packed head blocks instead, and after
// all layers come the residual tails: per layer, K then V, bf16 [num_tail_slots, num_kv_heads,
// tail_blocks * block_size, head_dim], one slot per sequence the engine holds. Blocks are
// addressed by BlockId; which sequence owns a block is the scheduler's business, not the pool's.
// Blocks and tail slots move to and from host bytes (KV transfers, engine/api/step.h KvBlob) in
// the pool's own format: a block is every layer in order, K then V, KBlockBytes / VBlockBytes
// each; a tail slot every layer, K then V, the whole ring.
// Host memory (an anonymous mapping) for a backend whose memory is host memory, one allocation
// of the backend's device memory otherwise.
// Thread safety: none; the engine loop owns the pool.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
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
  // Low-bit formats: K grouped per token instead of per channel, and how many residual tails
  // (sequences) the pool holds.
  bool k_per_token = false;
  int32_t num_tail_slots = 0;
  // Blocks in each tail's ring: the partial block plus tail_blocks - 1 newest full ones stay in
  // bf16 for the sequence's own attention (kernels/common/kv_format.h).
  int32_t tail_blocks = 1;
  // K and V stored Hadamard-rotated over head_dim (PagedKvView::hadamard).
  bool hadamard = false;
  // Low-bit formats: where the codes sit (the backend's Ops::PackedKvCodeOrder).
  KvCodeOrder code_order = KvCodeOrder::kRows;

  // Bytes one block takes in one layer, K and V (scales and zeros included).
  int64_t KBlockBytes() const;
  int64_t VBlockBytes() const;
  // Bytes one block takes across all layers, K and V.
  int64_t BytesPerBlock() const;
  // Bytes of all residual tails (0 for element formats).
  int64_t TailBytes() const;
  // Bytes of one tail slot across all layers, K and V (0 for element formats).
  int64_t TailSlotBytes() const;
  // Everything two pools must share for their blocks and tails to be byte-compatible, as a
  // stable, readable string (KvCapacity::kv_layout): the dtype, block size, layers, KV heads,
  // head_dim and, for low-bit formats, the K grouping, the tail ring and the rotation, e.g.
  // "int4/bs32/L30/kvh3/d64/k:channel/tail:5/hadamard/codes:lanes" or "bf16/bs16/L2/kvh2/d32".
  // The number
  // of blocks and of tail slots is not part of it.
  std::string Layout() const;
  KvFormatSpec Format(int32_t num_heads) const;
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

  // Copies block `src` to `dst` in every layer (K and V), queued on the backend. Low-bit formats:
  // the packed form only (a full block; partial blocks live in their sequence's tail).
  void CopyBlock(BlockId src, BlockId dst);

  // Copies tail slot `src` to `dst` in every layer, queued on the backend.
  void CopyTail(int32_t src, int32_t dst);

  // KV transfers. `host` holds blocks.size() * shape().BytesPerBlock() bytes, block after block
  // in the order of `blocks`. Export waits for the work queued before it (so it sees every
  // earlier write), copies, and reports a device failure; import is queued on the backend like
  // the block copies (`host` must stay valid until the backend's next Synchronize) and its
  // errors surface there. Block ids must be in range (checked).
  absl::Status ExportBlocks(std::span<const BlockId> blocks, uint8_t* host);
  void ImportBlocks(std::span<const BlockId> blocks, const uint8_t* host);
  // The same for tail slot `slot` (low-bit formats): `host` holds shape().TailSlotBytes().
  absl::Status ExportTail(int32_t slot, uint8_t* host);
  void ImportTail(int32_t slot, const uint8_t* host);

 private:
  KvPool(const KvPoolShape& shape, int32_t num_blocks, Backend& backend, void* memory,
         int64_t total_bytes);
  // Calls `visit(device_bytes, num_bytes)` for each part of `block` (or of tail slot `slot`) in
  // transfer order: every layer, K then V.
  template <typename Visit>
  void ForEachBlockPart(int32_t block, Visit visit) const;
  template <typename Visit>
  void ForEachTailPart(int32_t slot, Visit visit) const;

  Backend& backend_;
  DeviceBuffer device_memory_;  // empty for host memory (memory_ is then a mapping)
  KvPoolShape shape_;
  int32_t num_blocks_;
  void* memory_;
  int64_t total_bytes_;
};

}  // namespace loom
