#include "engine/kv/kv_pool.h"

#include <sys/mman.h>

#include <cstring>
#include <utility>

#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {

namespace {

KvPackedLayout Packed(const KvPoolShape& s) {
  return {TraitsOf(s.dtype).kv_code_bits, s.block_size, s.head_dim, s.k_per_token,
          s.code_order};
}

}  // namespace

int64_t KvPoolShape::KBlockBytes() const {
  if (IsLowBitKvDType(dtype)) return int64_t{num_kv_heads} * Packed(*this).k_head_bytes();
  return int64_t{num_kv_heads} * block_size * head_dim * static_cast<int64_t>(DTypeSize(dtype));
}

int64_t KvPoolShape::VBlockBytes() const {
  if (IsLowBitKvDType(dtype)) return int64_t{num_kv_heads} * Packed(*this).v_head_bytes();
  return KBlockBytes();
}

int64_t KvPoolShape::BytesPerBlock() const {
  return int64_t{num_layers} * (KBlockBytes() + VBlockBytes());
}

int64_t KvPoolShape::TailBytes() const {
  if (!IsLowBitKvDType(dtype)) return 0;
  return int64_t{2} * num_layers * num_tail_slots * num_kv_heads * tail_blocks * block_size *
         head_dim * static_cast<int64_t>(sizeof(uint16_t));
}

int64_t KvPoolShape::TailSlotBytes() const {
  return num_tail_slots > 0 ? TailBytes() / num_tail_slots : 0;
}

std::string KvPoolShape::Layout() const {
  std::string layout = StrCat(DTypeName(dtype), "/bs", block_size, "/L", num_layers, "/kvh",
                              num_kv_heads, "/d", head_dim);
  if (IsLowBitKvDType(dtype)) {
    layout += StrCat("/k:", k_per_token ? "token" : "channel", "/tail:", tail_blocks,
                     hadamard ? "/hadamard" : "/plain", "/codes:", KvCodeOrderName(code_order));
  }
  return layout;
}

KvFormatSpec KvPoolShape::Format(int32_t num_heads) const {
  return {dtype,        k_per_token, head_dim, block_size, num_heads,
          num_kv_heads, tail_blocks, hadamard, code_order};
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
  if (!IsKvCacheDType(shape.dtype)) {
    return absl::InvalidArgumentError(
        StrCat("KV pool: unsupported cache dtype ", DTypeName(shape.dtype)));
  }
  if (IsLowBitKvDType(shape.dtype) && (shape.num_tail_slots <= 0 || shape.tail_blocks <= 0)) {
    return absl::InvalidArgumentError("KV pool: a low-bit format needs residual tail slots");
  }
  const int64_t total = shape.BytesPerBlock() * num_blocks + shape.TailBytes();
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
      total_bytes_(total_bytes) {}

KvPool::~KvPool() {
  if (device_memory_.data() == nullptr) munmap(memory_, static_cast<size_t>(total_bytes_));
}

PagedKvView KvPool::Layer(int32_t layer) const {
  LOOM_CHECK(layer >= 0 && layer < shape_.num_layers, "layer ", layer);
  const int64_t k_bytes = shape_.KBlockBytes() * num_blocks_;
  const int64_t v_bytes = shape_.VBlockBytes() * num_blocks_;
  char* base = static_cast<char*>(memory_) + layer * (k_bytes + v_bytes);
  PagedKvView view;
  view.k = base;
  view.v = base + k_bytes;
  view.dtype = shape_.dtype;
  view.num_blocks = num_blocks_;
  view.num_kv_heads = shape_.num_kv_heads;
  view.block_size = shape_.block_size;
  view.head_dim = shape_.head_dim;
  view.k_per_token = shape_.k_per_token;
  view.code_order = shape_.code_order;
  view.hadamard = shape_.hadamard;
  if (IsLowBitKvDType(shape_.dtype)) {
    const int64_t tail_bytes = shape_.TailBytes() / (2 * shape_.num_layers);
    char* tails = static_cast<char*>(memory_) + shape_.BytesPerBlock() * num_blocks_ +
                  int64_t{2} * layer * tail_bytes;
    view.tail_k = tails;
    view.tail_v = tails + tail_bytes;
    view.num_tail_slots = shape_.num_tail_slots;
    view.tail_blocks = shape_.tail_blocks;
  }
  return view;
}

void KvPool::CopyBlock(BlockId src, BlockId dst) {
  LOOM_CHECK(src.value() >= 0 && src.value() < num_blocks_ && dst.value() >= 0 &&
                 dst.value() < num_blocks_,
             "block copy ", src.value(), " -> ", dst.value());
  for (int32_t layer = 0; layer < shape_.num_layers; ++layer) {
    const PagedKvView view = Layer(layer);
    for (const auto& [base, block_bytes] : {std::pair{view.k, shape_.KBlockBytes()},
                                            std::pair{view.v, shape_.VBlockBytes()}}) {
      char* bytes = static_cast<char*>(base);
      backend_.CopyWithinDevice(bytes + dst.value() * block_bytes,
                                bytes + src.value() * block_bytes, block_bytes);
    }
  }
}

void KvPool::CopyTail(int32_t src, int32_t dst) {
  LOOM_CHECK(src >= 0 && src < shape_.num_tail_slots && dst >= 0 && dst < shape_.num_tail_slots,
             "tail copy ", src, " -> ", dst);
  for (int32_t layer = 0; layer < shape_.num_layers; ++layer) {
    const PagedKvView view = Layer(layer);
    const int64_t slot_bytes = view.tail_slot_stride() * int64_t{sizeof(uint16_t)};
    for (void* base : {view.tail_k, view.tail_v}) {
      char* bytes = static_cast<char*>(base);
      backend_.CopyWithinDevice(bytes + dst * slot_bytes, bytes + src * slot_bytes, slot_bytes);
    }
  }
}

template <typename Visit>
void KvPool::ForEachBlockPart(int32_t block, Visit visit) const {
  LOOM_CHECK(block >= 0 && block < num_blocks_, "KV transfer of block ", block);
  for (int32_t layer = 0; layer < shape_.num_layers; ++layer) {
    const PagedKvView view = Layer(layer);
    visit(static_cast<char*>(view.k) + block * shape_.KBlockBytes(), shape_.KBlockBytes());
    visit(static_cast<char*>(view.v) + block * shape_.VBlockBytes(), shape_.VBlockBytes());
  }
}

template <typename Visit>
void KvPool::ForEachTailPart(int32_t slot, Visit visit) const {
  LOOM_CHECK(slot >= 0 && slot < shape_.num_tail_slots, "KV transfer of tail slot ", slot);
  for (int32_t layer = 0; layer < shape_.num_layers; ++layer) {
    const PagedKvView view = Layer(layer);
    const int64_t slot_bytes = view.tail_slot_stride() * int64_t{sizeof(uint16_t)};
    visit(static_cast<char*>(view.tail_k) + slot * slot_bytes, slot_bytes);
    visit(static_cast<char*>(view.tail_v) + slot * slot_bytes, slot_bytes);
  }
}

absl::Status KvPool::ExportBlocks(std::span<const BlockId> blocks, uint8_t* host) {
  // Everything queued before (block copies, imports, earlier steps' writes) lands first.
  LOOM_RETURN_IF_ERROR(backend_.Synchronize());
  for (BlockId block : blocks) {
    ForEachBlockPart(block.value(), [&](const char* device, int64_t bytes) {
      backend_.CopyToHost(host, device, bytes);
      host += bytes;
    });
  }
  return backend_.Synchronize();
}

void KvPool::ImportBlocks(std::span<const BlockId> blocks, const uint8_t* host) {
  for (BlockId block : blocks) {
    ForEachBlockPart(block.value(), [&](char* device, int64_t bytes) {
      backend_.CopyToDevice(device, host, bytes);
      host += bytes;
    });
  }
}

absl::Status KvPool::ExportTail(int32_t slot, uint8_t* host) {
  LOOM_RETURN_IF_ERROR(backend_.Synchronize());
  ForEachTailPart(slot, [&](const char* device, int64_t bytes) {
    backend_.CopyToHost(host, device, bytes);
    host += bytes;
  });
  return backend_.Synchronize();
}

void KvPool::ImportTail(int32_t slot, const uint8_t* host) {
  ForEachTailPart(slot, [&](char* device, int64_t bytes) {
    backend_.CopyToDevice(device, host, bytes);
    host += bytes;
  });
}

}  // namespace loom
