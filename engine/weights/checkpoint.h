// A model's weights as a Hugging Face model folder stores them: one safetensors file or several
// shards listed by an index, opened together and looked up by tensor name.
//
// Which files Open reads, in order of preference:
//   1. `model.safetensors.index.json`: its "weight_map" maps each tensor name to a shard file in
//      the same folder. Every shard named must exist and hold every tensor mapped to it; a shard
//      name that could leave the folder (containing '/', '\' or "..") is refused. The checkpoint
//      holds exactly the tensors the weight_map lists; other tensors in the shards are ignored.
//   2. `model.safetensors`.
//   3. the one `*.safetensors` file in the folder (more than one is an error: which is meant?).
// `model_dir` may also name a safetensors file directly, or a GGUF file (recognised by its magic,
// whatever its name): its tensors then appear under Hugging Face names
// (engine/weights/gguf_model.h) and gguf() gives the file's metadata.
//
// Every file is validated by SafetensorsFile::Open; tensor data is used in place from the
// mappings. Errors name the path and the tensor: NotFound for a missing folder, file or shard,
// InvalidArgument for a malformed index or an index that disagrees with its shards, and
// SafetensorsFile's codes for a malformed shard.
// Thread safety: immutable after Open; any number of threads may read concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/weights/gguf.h"
#include "engine/weights/gguf_model.h"
#include "engine/weights/safetensors.h"

namespace loom {

// The open files of one model and a by-name view of their tensors. Movable; the tensors and
// their data stay where they are when it moves.
class Checkpoint {
 public:
  // Opens the checkpoint in `model_dir` (see the file comment for which files it reads).
  static absl::StatusOr<Checkpoint> Open(const std::string& model_dir,
                                         const MapOptions& options = {});

  Checkpoint(Checkpoint&&) = default;
  Checkpoint& operator=(Checkpoint&&) = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  // The folder (or file) it was opened from.
  const std::string& path() const { return path_; }

  // The tensor called `name`, or null. The pointer lives as long as this Checkpoint.
  const TensorInfo* Find(std::string_view name) const;

  // All tensors, sorted by name.
  const std::vector<const TensorInfo*>& tensors() const { return tensors_; }

  // The open files (one, or one per shard in name order), e.g. to read their metadata.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

  // The GGUF file the checkpoint is, or null for safetensors.
  const GgufFile* gguf() const { return gguf_.get(); }

  // Whether every file's bytes are a private copy in anonymous memory (MapOptions::memory).
  bool in_anonymous_memory() const;

  // Sum of the tensors' bytes and of their element counts.
  int64_t total_bytes() const { return total_bytes_; }
  int64_t num_parameters() const { return num_parameters_; }

 private:
  Checkpoint() = default;
  static absl::StatusOr<Checkpoint> OpenSingle(const std::string& path, const MapOptions& options);
  static absl::StatusOr<Checkpoint> OpenSharded(const std::string& dir,
                                                const std::string& index_path,
                                                const MapOptions& options);
  static absl::StatusOr<Checkpoint> OpenGguf(const std::string& path, const MapOptions& options);
  // Sorts tensors_ and computes the totals.
  void Finish();

  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<GgufTensorView> gguf_view_;
  std::vector<const TensorInfo*> tensors_;  // into files_ or gguf_view_, sorted by name
  int64_t total_bytes_ = 0;
  int64_t num_parameters_ = 0;
};

}  // namespace loom
