// Reader for GGUF files (versions 2 and 3), the single-file model format of llama.cpp and Ollama:
// a header, typed metadata (hyper-parameters, tokenizer, chat template), tensor infos, then the
// tensor data, aligned. The file is memory-mapped read-only and tensors are used in place.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor_count, u64 metadata_count; then
// metadata_count entries (string key, u32 value type, value); then tensor_count infos (string
// name, u32 n_dims, u64 dims[n_dims] with dims[0] the contiguous one, u32 ggml type, u64 offset
// from the data section); then padding to `general.alignment` (default 32) and the data section.
// A string is a u64 length and that many bytes; an array is a u32 element type, a u64 count and
// the elements.
//
// Open/Parse validate everything before anything is handed out: the magic and version; every
// length, count and offset against the bytes that are actually there (computed without
// overflow), so a truncated file is DataLoss, never a read past the end; known value types, no
// nested arrays, no duplicate keys or tensor names; keys and names of at most 64 KiB; at most 4
// dims, none negative; a supported tensor type whose blocks tile each row; tensor offsets aligned
// and each tensor's bytes inside the file. Errors are returned, never asserted, and name the file
// and the key or tensor at fault:
//   NotFound          the file does not exist
//   DataLoss          the file ends before something its header promises (truncated)
//   Unimplemented     a tensor type loom cannot run (IQ2_XS, Q5_0, ...), named in the message
//   InvalidArgument   anything else malformed
//
// Thread safety: immutable after Open; any number of threads may read concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/weights/safetensors.h"
#include "kernels/common/dtype.h"

namespace loom {

// The value types of GGUF metadata, with their numbers in the file.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// "u32", "string", "array", ... for messages.
std::string_view GgufTypeName(GgufType type);

// One metadata value: a scalar, a string, or an array of scalars or strings. Strings and array
// elements point into the file's bytes, which must outlive the value (the GgufFile owns them).
class GgufValue {
 public:
  GgufType type() const { return type_; }

  // Scalars. Int: any integer type whose value fits an int64. Float: f32 or f64 (integers are not
  // converted). Bool: a bool. String: a string. nullopt when the type does not match.
  std::optional<int64_t> Int() const;
  std::optional<double> Float() const;
  std::optional<bool> Bool() const;
  std::optional<std::string_view> String() const;

  // Arrays: type() == kArray. element_type() and size() are meaningful only for arrays; the
  // element accessors return nullopt for an index out of range or an element type that does not
  // match (the same conversions as the scalar accessors).
  GgufType element_type() const { return element_type_; }
  int64_t size() const { return count_; }
  std::optional<int64_t> IntAt(int64_t index) const;
  std::optional<double> FloatAt(int64_t index) const;
  std::optional<std::string_view> StringAt(int64_t index) const;

 private:
  friend class GgufParser;
  GgufType type_ = GgufType::kU8;
  GgufType element_type_ = GgufType::kU8;
  const uint8_t* data_ = nullptr;          // the scalar, the string's bytes, or the first element
  int64_t count_ = 0;                      // string length, or array element count
  std::vector<std::string_view> strings_;  // arrays of strings
};

// One tensor: its GGUF name, type and shape, and its bytes in the file.
struct GgufTensor {
  std::string name;
  DType dtype = DType::kF32;
  uint32_t ggml_type = 0;      // the number in the file
  std::vector<int64_t> dims;   // as stored: dims[0] is the contiguous (row) dimension
  std::vector<int64_t> shape;  // row-major order, dims reversed: [rows, cols] for a matrix
  uint64_t offset = 0;         // from the start of the data section
  const void* data = nullptr;  // num_bytes bytes
  int64_t num_bytes = 0;
};

class GgufFile {
 public:
  // Maps and validates the file at `path`.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                        const MapOptions& options = {});
  // Validates `bytes` (which must outlive the result) as a GGUF file; `name` names it in errors.
  // For tests and fuzzing; Open uses the same parser.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes,
                                                         std::string name);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  int64_t alignment() const { return alignment_; }
  int64_t file_bytes() const { return static_cast<int64_t>(bytes_.size()); }
  int64_t data_offset() const { return data_offset_; }
  // The file's first byte (the mapping, or Parse's bytes): a tensor's `data` minus this is its
  // offset in the file.
  const void* mapping() const { return bytes_.data(); }
  // Whether Open copied the file into anonymous memory (MapOptions::memory).
  bool in_anonymous_memory() const { return file_.anonymous; }

  // Metadata in file order, and by key (null when absent).
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;

  // Typed lookups for the common case; an absent key or a value of another type gives nullopt.
  std::optional<int64_t> GetInt(std::string_view key) const;
  std::optional<double> GetFloat(std::string_view key) const;  // f32/f64, or an integer
  std::optional<bool> GetBool(std::string_view key) const;
  std::optional<std::string_view> GetString(std::string_view key) const;

  // Tensors in file order, and by name (null when absent).
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::string path_;
  FileBytes file_;  // owned bytes (Open), or none (Parse)
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  int64_t alignment_ = 32;
  int64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensor> tensors_;
};

// The DType of a ggml tensor type number, or nullopt when loom cannot run it.
std::optional<DType> DTypeFromGgmlType(uint32_t ggml_type);

// "Q4_K", "IQ2_XS", ... for a ggml type number ("type 99" for an unknown one).
std::string GgmlTypeName(uint32_t ggml_type);

// True when `path` names a GGUF file: an existing regular file whose first 4 bytes are "GGUF".
bool IsGgufFile(const std::string& path);

}  // namespace loom
