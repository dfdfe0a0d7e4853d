#include "engine/backend/kv_format_check.h"

#include "engine/common/strings.h"

namespace loom {

std::string KvFormatName(const KvFormatSpec& format) {
  if (!IsLowBitKvDType(format.dtype)) return std::string(DTypeName(format.dtype));
  return StrCat(DTypeName(format.dtype), " (K per ", format.k_per_token ? "token" : "channel",
                ", V per token, group ", format.block_size, ", bf16 residual of ",
                format.tail_blocks - 1, "-", format.tail_blocks, " blocks",
                format.hadamard ? ", Hadamard-rotated" : "", ")");
}

absl::Status UnsupportedKvFormat(const KvFormatSpec& format, std::string_view backend) {
  return absl::InvalidArgumentError(
      StrCat("KV cache format ", KvFormatName(format), " with head_dim ", format.head_dim,
             ", block_size ", format.block_size, " and ", format.num_heads, " query heads over ",
             format.num_kv_heads, " KV heads has no kernel on ", backend));
}

absl::Status CheckKvLayout(const KvFormatSpec& format) {
  if (!IsKvCacheDType(format.dtype)) {
    return absl::InvalidArgumentError(
        StrCat(DTypeName(format.dtype), " is not a KV cache format"));
  }
  if (format.hadamard && (format.head_dim <= 0 || (format.head_dim & (format.head_dim - 1)) != 0)) {
    return absl::InvalidArgumentError(StrCat("the Hadamard rotation of the KV cache needs a "
                                             "head_dim that is a power of two; this model's is ",
                                             format.head_dim));
  }
  if (!IsLowBitKvDType(format.dtype)) return absl::OkStatus();
  if (format.head_dim % kKvPackChunk != 0 || format.head_dim > 512) {
    return absl::InvalidArgumentError(StrCat(
        "KV cache format ", KvFormatName(format), " needs a head_dim that is a multiple of ",
        kKvPackChunk, " and at most 512; this model's is ", format.head_dim));
  }
  const int32_t bs = format.block_size;
  if (bs != 16 && bs != 32 && bs != 64 && bs != 128) {
    return absl::InvalidArgumentError(
        StrCat("KV cache format ", KvFormatName(format),
               " quantizes K in groups of one block: block_size must be 16, 32, 64 or 128, got ",
               bs));
  }
  return absl::OkStatus();
}

}  // namespace loom
