// Start-up checks of a KV cache format against what a backend's kernels serve (Ops::
// CheckKvFormat). The rules every backend shares live here; each backend adds its own limits.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "kernels/common/attention_args.h"

namespace loom {

// "int4 (K per channel, V per token, group 32, bf16 residual of 4-5 blocks, Hadamard-rotated)",
// "bf16", ...: the format as messages name it.
std::string KvFormatName(const KvFormatSpec& format);

// The error a backend returns for a combination it has no kernel for.
absl::Status UnsupportedKvFormat(const KvFormatSpec& format, std::string_view backend);

// Rules of the packed layout (kernels/common/kv_format.h) for low-bit formats: head_dim a
// multiple of kKvPackChunk and at most 512; block_size (the K group along tokens) 16, 32, 64 or
// 128. OK for the element formats.
absl::Status CheckKvLayout(const KvFormatSpec& format);

}  // namespace loom
