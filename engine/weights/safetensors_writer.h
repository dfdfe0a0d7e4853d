// Writer for safetensors files and sharded checkpoints: test fixtures (valid files to corrupt)
// and random-weight checkpoints of real model shapes for benchmarks (several GB).
//
// A file is written as the format prescribes and the official writer does: the 8-byte length,
// the JSON header ("__metadata__" first, then the tensors) padded with spaces to a multiple of 8
// bytes, then each tensor's bytes, contiguous, in the order given. Tensor bytes are streamed:
// each tensor is either a pointer to its bytes or a callback that produces them in chunks, so a
// checkpoint never has to exist in memory as a whole.
//
// Writes are atomic: the file is written to `<path>.tmp`, flushed to disk, then renamed over
// `path`; on any error the temporary file is removed and `path` is left as it was. I/O errors,
// invalid names and a callback producing the wrong number of bytes come back as a Status.
// Thread safety: the functions share no state; concurrent calls must use different paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/common/dtype.h"

namespace loom {

// Takes the next `num_bytes` bytes of a tensor being written.
using ByteSink = std::function<absl::Status(const void* data, size_t num_bytes)>;

// Produces all bytes of one tensor by calling `sink` any number of times, in order. Returning an
// error (its own, or one the sink returned) abandons the whole file.
using TensorProducer = std::function<absl::Status(const ByteSink& sink)>;

// One tensor to write: its bytes come from `data` when that is set, otherwise from `produce`.
// The byte count is the product of `shape` times the dtype size.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  TensorProducer produce = nullptr;
};

// Writes `tensors` (names unique, valid UTF-8, not "__metadata__") with `metadata` to `path`.
absl::Status WriteSafetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Writes a checkpoint folder `dir` (created if missing) the way Hugging Face does: when all
// tensors fit in `max_shard_bytes`, one `model.safetensors`; otherwise shards
// `model-00001-of-0000N.safetensors`, filled in order, each closed before the tensor that would
// take it past `max_shard_bytes` (a tensor larger than that gets a shard of its own), plus
// `model.safetensors.index.json` with "metadata.total_size" and the "weight_map". Every shard
// carries `metadata`.
absl::Status WriteShardedCheckpoint(const std::string& dir, std::span<const TensorToWrite> tensors,
                                    int64_t max_shard_bytes,
                                    const std::map<std::string, std::string>& metadata = {});

}  // namespace loom
