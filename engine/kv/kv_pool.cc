#include "engine/kv/kv_pool.h"

#include <sys/mman.h>

#include <cstring>

#include "engine/common/strings.h"
#include "engine/common/logging.h"

namespace loom {

int64_t KvPoolShape::BytesPerBlock() const {
  return int64_t{2} * num_layers * num_kv_heads * block_size * head_dim *
         static_cast<int64_t>(DTypeSize(dtype));
}

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::Create(const KvPoolShape& shape,
                                                       int32_t num_blocks, Backend& backend,
                                                       bool populate) {
  if (shape.num_layers <= 0 || shape.num_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.block_size <= 0 || num_blocks <= 0) {
    return absl::InvalidArgumentError(StrCat(
        "KV pool: layers, heads, head_dim, block_size and num_blocks must be positive (got ",
        shape.num_layers, ", ", shape.num_kv_heads, ", ", shape.head_dim, ", ", shape.block_size,
        ", ", num_blocks, ")"));
  }
  if (!IsFloatDType(shape.dtype)) {
    return absl::InvalidArgumentError(
        StrCat("KV pool: unsupported cache dtype ", DTypeName(shape.dtype)));
  }
  const int64_t total = shape.BytesPerBlock() * num_blocks;
  if (!backend.host_memory()) {
    absl::StatusOr<DeviceBuffer> buffer = backend.Allocate(total);
    if (!buffer.ok()) {
      return absl::ResourceExhaustedError(StrCat("KV pool: ", num_blocks, " blocks (", total,
                                                 " bytes): ", buffer.status().message()));
    }
    void* memory = buffer->data();
    std::unique_ptr<KvPool> pool(new KvPool(shape, num_blocks, backend, memory, total));
    pool->device_memory_ = std::move(*buffer);
    return pool;
  }
  // Anonymous mappings are zero-filled and page-aligned; large pools get transparent huge pages.
  // With `populate` every page is faulted in now: the memory is committed at start-up (a server
  // fails there, not mid-request, when it cannot have it) and resident memory stays flat after.
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : MAP_NORESERVE);
  void* memory = mmap(nullptr, static_cast<size_t>(total), PROT_READ | PROT_WRITE, flags, -1, 0);
  if (memory == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        StrCat("KV pool: cannot allocate ", total, " bytes for ", num_blocks, " blocks: ",
                     std::strerror(errno)));
  }
  madvise(memory, static_cast<size_t>(total), MADV_HUGEPAGE);
  return std::unique_ptr<KvPool>(new KvPool(shape, num_blocks, backend, memory, total));
}

KvPool::KvPool(const KvPoolShape& shape, int32_t num_blocks, Backend& backend, void* memory,
               int64_t total_bytes)
    : backend_(backend),
      shape_(shape),
      num_blocks_(num_blocks),
      memory_(memory),
      total_bytes_(total_bytes),
      layer_bytes_(total_bytes / (2 * shape.num_layers)) {}

KvPool::~KvPool() {
  if (device_memory_.data() == nullptr) munmap(memory_, static_cast<size_t>(total_bytes_));
}

PagedKvView KvPool::Layer(int32_t layer) const {
  LOOM_CHECK(layer >= 0 && layer < shape_.num_layers, "layer ", layer);
  char* base = static_cast<char*>(memory_) + 2 * layer * layer_bytes_;
  PagedKvView view;
  view.k = base;
  view.v = base + layer_bytes_;
  view.dtype = shape_.dtype;
  view.num_blocks = num_blocks_;
  view.num_kv_heads = shape_.num_kv_heads;
  view.block_size = shape_.block_size;
  view.head_dim = shape_.head_dim;
  return view;
}

void KvPool::CopyBlock(BlockId src, BlockId dst) {
  LOOM_CHECK(src.value() >= 0 && src.value() < num_blocks_ && dst.value() >= 0 &&
                 dst.value() < num_blocks_,
             "block copy ", src.value(), " -> ", dst.value());
  const int64_t block_bytes = layer_bytes_ / num_blocks_;
  for (int32_t layer = 0; layer < shape_.num_layers; ++layer) {
    const PagedKvView view = Layer(layer);
    for (void* base : {view.k, view.v}) {
      char* bytes = static_cast<char*>(base);
      backend_.CopyWithinDevice(bytes + dst.value() * block_bytes,
                                bytes + src.value() * block_bytes, block_bytes);
    }
  }
}

}  // namespace loom
