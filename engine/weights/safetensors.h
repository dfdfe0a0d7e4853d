// Reader for one Hugging Face safetensors file: the file is memory-mapped read-only (or copied
// into anonymous memory, MapOptions::memory) and every tensor's bytes are used in place, as
// pointers into that (no copy per tensor).
//
// File layout: an 8-byte little-endian header length N, then N bytes of JSON (an object mapping
// tensor names to {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional
// "__metadata__" object of strings), then the data section; offsets are relative to its start.
//
// Open() validates everything the reference implementation does, and a little more, before any
// pointer is handed out: header length within [2, 100 MB] and within the file; a JSON object;
// each entry with a known dtype, non-negative integer dims and two integer offsets; the element
// count times the dtype size equal to end - begin, computed without overflow; every range inside
// the data section; no two ranges overlapping; and the ranges covering the data section exactly
// (no holes, no trailing bytes). So, after a successful Open, every TensorInfo::data points at
// exactly num_bytes readable bytes.
//
// Errors are returned, never asserted; each message names the file and, where one is at fault,
// the tensor. Status codes:
//   NotFound          the file does not exist
//   DataLoss          the file is shorter than its header says (truncated)
//   Unimplemented     a valid safetensors dtype that loom does not support (F8_E4M3, U32, ...)
//   InvalidArgument   anything else malformed in the header
//   other             the errno of a failed open/fstat/mmap
//
// Alignment: a tensor's data is as aligned as its file offset makes it. Writers (the official
// one and WriteSafetensors) pad the header to a multiple of 8 bytes, so a tensor is aligned to
// 8 bytes when its begin offset is; readers that need more must check.
//
// The mapping is private and read-only; if another process truncates the file while it is
// mapped, touching the lost pages raises SIGBUS, which no reader of mapped files can prevent (a
// copy in anonymous memory is not affected).
// Thread safety: immutable after Open; any number of threads may read concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/weights/file_mapping.h"
#include "kernels/common/dtype.h"

namespace loom {

// One tensor of a checkpoint. Plain data; `data` points into the mapping of the file it came
// from and stays valid as long as that SafetensorsFile (or the Checkpoint owning it) lives.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // empty for a scalar
  const void* data = nullptr;  // num_bytes bytes, read-only
  int64_t num_bytes = 0;
  std::string file;  // path of the file holding the tensor, for messages

  // Product of the dims (1 for a scalar, 0 when any dim is 0).
  int64_t NumElements() const;
};

// The dtype a safetensors header name ("BF16", "F32", ...) stands for. nullopt for a name that
// loom does not support, whether or not safetensors defines it.
std::optional<DType> DTypeFromSafetensorsName(std::string_view name);

// The safetensors header name of `dtype` ("BF16", "F32", ...).
std::string_view SafetensorsDTypeName(DType dtype);

// "[64, 32]" (and "[]" for a scalar), for messages.
std::string FormatShape(std::span<const int64_t> shape);

// One open, validated safetensors file. Not copyable or movable: tensors point into it.
class SafetensorsFile {
 public:
  // Maps and validates the file at `path`. See the file comment for the checks and error codes.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path,
                                                               const MapOptions& options = {});

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }

  // All tensors, in the order of their data in the file.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  // The tensor called `name`, or null.
  const TensorInfo* Find(std::string_view name) const;

  // The "__metadata__" strings (empty when the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Size of the whole file, and of the 8-byte length plus the JSON header before the data.
  int64_t file_bytes() const { return static_cast<int64_t>(file_.bytes); }
  // The start of the file's mapping: a tensor's `data` minus this is its offset in the file.
  const void* mapping() const { return file_.data; }
  // Whether the bytes are a private copy in anonymous memory (MapOptions::memory).
  bool in_anonymous_memory() const { return file_.anonymous; }
  int64_t data_offset() const { return data_offset_; }

 private:
  SafetensorsFile(std::string path, const FileBytes& file);
  absl::Status ParseAndValidate();

  std::string path_;
  FileBytes file_;  // the whole file, read-only
  int64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;  // sorted by data offset
  std::vector<uint32_t> by_name_;    // indices into tensors_, sorted by tensor name
  std::map<std::string, std::string> metadata_;
};

}  // namespace loom
