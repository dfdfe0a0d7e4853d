#include "engine/weights/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

constexpr uint32_t kMinVersion = 2;
constexpr uint32_t kMaxVersion = 3;
constexpr uint64_t kMaxNameBytes = 65536;  // keys and tensor names
constexpr uint32_t kMaxDims = 4;

// Size of a scalar value type in the file; 0 for string and array.
int64_t ScalarBytes(GgufType type) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool KnownType(uint32_t type) { return type <= static_cast<uint32_t>(GgufType::kF64); }

template <typename T>
T Load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

std::optional<int64_t> LoadInt(GgufType type, const uint8_t* p) {
  switch (type) {
    case GgufType::kU8:
      return Load<uint8_t>(p);
    case GgufType::kI8:
      return Load<int8_t>(p);
    case GgufType::kU16:
      return Load<uint16_t>(p);
    case GgufType::kI16:
      return Load<int16_t>(p);
    case GgufType::kU32:
      return Load<uint32_t>(p);
    case GgufType::kI32:
      return Load<int32_t>(p);
    case GgufType::kI64:
      return Load<int64_t>(p);
    case GgufType::kU64: {
      const uint64_t v = Load<uint64_t>(p);
      if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(v);
    }
    default:
      return std::nullopt;
  }
}

std::optional<double> LoadFloat(GgufType type, const uint8_t* p) {
  if (type == GgufType::kF32) return Load<float>(p);
  if (type == GgufType::kF64) return Load<double>(p);
  return std::nullopt;
}

struct GgmlTypeEntry {
  uint32_t number;
  std::string_view name;
  std::optional<DType> dtype;
};

// Every ggml type llama.cpp defines, so a refusal can name it; those with a DType run.
constexpr GgmlTypeEntry kGgmlTypes[] = {
    {0, "F32", DType::kF32},      {1, "F16", DType::kF16},       {2, "Q4_0", DType::kQ4_0},
    {3, "Q4_1", DType::kQ4_1},    {6, "Q5_0", std::nullopt},     {7, "Q5_1", std::nullopt},
    {8, "Q8_0", DType::kQ8_0},    {9, "Q8_1", std::nullopt},     {10, "Q2_K", std::nullopt},
    {11, "Q3_K", std::nullopt},   {12, "Q4_K", DType::kQ4_K},    {13, "Q5_K", DType::kQ5_K},
    {14, "Q6_K", DType::kQ6_K},   {15, "Q8_K", std::nullopt},    {16, "IQ2_XXS", std::nullopt},
    {17, "IQ2_XS", std::nullopt}, {18, "IQ3_XXS", std::nullopt}, {19, "IQ1_S", std::nullopt},
    {20, "IQ4_NL", std::nullopt}, {21, "IQ3_S", std::nullopt},   {22, "IQ2_S", std::nullopt},
    {23, "IQ4_XS", std::nullopt}, {24, "I8", std::nullopt},      {25, "I16", std::nullopt},
    {26, "I32", std::nullopt},    {27, "I64", std::nullopt},     {28, "F64", std::nullopt},
    {29, "IQ1_M", std::nullopt},  {30, "BF16", DType::kBF16},    {34, "TQ1_0", std::nullopt},
    {35, "TQ2_0", std::nullopt},  {39, "MXFP4", std::nullopt},
};

const GgmlTypeEntry* FindGgmlType(uint32_t number) {
  for (const GgmlTypeEntry& entry : kGgmlTypes) {
    if (entry.number == number) return &entry;
  }
  return nullptr;
}

}  // namespace

// Reads the file front to back with every read checked against the end.
class GgufParser {
 public:
  explicit GgufParser(GgufFile& file) : file_(file), bytes_(file.bytes_) {}

  absl::Status Run() {
    LOOM_RETURN_IF_ERROR(Need(4, "the magic"));
    if (std::memcmp(bytes_.data(), "GGUF", 4) != 0) {
      return Error(absl::StatusCode::kInvalidArgument,
                   "does not start with \"GGUF\": not a GGUF file");
    }
    pos_ = 4;
    LOOM_ASSIGN_OR_RETURN(const uint32_t version, U32("the version"));
    if (version < kMinVersion || version > kMaxVersion) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat("GGUF version ", version, " is not supported (", kMinVersion, " to ",
                          kMaxVersion, ")"));
    }
    file_.version_ = version;
    LOOM_ASSIGN_OR_RETURN(const uint64_t tensor_count, U64("the tensor count"));
    LOOM_ASSIGN_OR_RETURN(const uint64_t kv_count, U64("the metadata count"));
    // Every entry takes at least 8 bytes (a key or name length): a count above that is a lie.
    if (kv_count > Remaining() / 8 || tensor_count > Remaining() / 8) {
      return Error(absl::StatusCode::kDataLoss,
                   StrCat("header promises ", kv_count, " metadata entries and ", tensor_count,
                          " tensors, more than the file's ", bytes_.size(), " bytes hold"));
    }
    std::set<std::string, std::less<>> keys;
    file_.metadata_.reserve(kv_count);
    for (uint64_t i = 0; i < kv_count; ++i) {
      LOOM_ASSIGN_OR_RETURN(std::string key, Name(StrCat("metadata key ", i)));
      if (!keys.insert(key).second) {
        return Error(absl::StatusCode::kInvalidArgument,
                     StrCat("metadata key '", key, "' repeats"));
      }
      LOOM_ASSIGN_OR_RETURN(const uint32_t type, U32(StrCat("the type of '", key, "'")));
      LOOM_ASSIGN_OR_RETURN(GgufValue value, Value(key, type));
      file_.metadata_.emplace_back(std::move(key), std::move(value));
    }
    if (const GgufValue* a = file_.Find("general.alignment")) {
      const std::optional<int64_t> alignment = a->Int();
      if (!alignment || *alignment < 1 || *alignment > (1 << 20) ||
          (*alignment & (*alignment - 1)) != 0) {
        return Error(absl::StatusCode::kInvalidArgument,
                     "general.alignment must be a power of two integer up to 1 MiB");
      }
      file_.alignment_ = *alignment;
    }
    std::set<std::string, std::less<>> names;
    file_.tensors_.reserve(tensor_count);
    for (uint64_t i = 0; i < tensor_count; ++i) {
      LOOM_ASSIGN_OR_RETURN(GgufTensor tensor, TensorInfoAt(i));
      if (!names.insert(tensor.name).second) {
        return Error(absl::StatusCode::kInvalidArgument,
                     StrCat("tensor '", tensor.name, "' appears twice"));
      }
      file_.tensors_.push_back(std::move(tensor));
    }
    const uint64_t align = static_cast<uint64_t>(file_.alignment_);
    const uint64_t data_offset = (pos_ + align - 1) / align * align;
    if (!file_.tensors_.empty() && data_offset > bytes_.size()) {
      return Error(absl::StatusCode::kDataLoss, "file ends before its data section");
    }
    file_.data_offset_ = static_cast<int64_t>(data_offset);
    for (GgufTensor& t : file_.tensors_) {
      const uint64_t available = bytes_.size() - std::min<uint64_t>(data_offset, bytes_.size());
      if (t.offset > available || static_cast<uint64_t>(t.num_bytes) > available - t.offset) {
        return Error(absl::StatusCode::kDataLoss,
                     StrCat("tensor '", t.name, "' (", t.num_bytes, " bytes at data offset ",
                            t.offset, ") ends past the end of the file: truncated"));
      }
      t.data = bytes_.data() + data_offset + t.offset;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(absl::StatusCode code, std::string_view message) const {
    return absl::Status(code, StrCat(file_.path_, ": ", message));
  }

  uint64_t Remaining() const { return bytes_.size() - pos_; }

  absl::Status Need(uint64_t n, std::string_view what) const {
    if (n > Remaining()) {
      return Error(absl::StatusCode::kDataLoss,
                   StrCat("file ends at byte ", bytes_.size(), " inside ", what, ": truncated"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint32_t> U32(std::string_view what) {
    LOOM_RETURN_IF_ERROR(Need(4, what));
    const uint32_t v = Load<uint32_t>(bytes_.data() + pos_);
    pos_ += 4;
    return v;
  }

  absl::StatusOr<uint64_t> U64(std::string_view what) {
    LOOM_RETURN_IF_ERROR(Need(8, what));
    const uint64_t v = Load<uint64_t>(bytes_.data() + pos_);
    pos_ += 8;
    return v;
  }

  // A string's bytes, in place.
  absl::StatusOr<std::string_view> Str(std::string_view what, uint64_t max_bytes) {
    LOOM_ASSIGN_OR_RETURN(const uint64_t length, U64(what));
    if (length > max_bytes) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat(what, " is ", length, " bytes long, more than ", max_bytes));
    }
    LOOM_RETURN_IF_ERROR(Need(length, what));
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return s;
  }

  absl::StatusOr<std::string> Name(std::string_view what) {
    LOOM_ASSIGN_OR_RETURN(std::string_view s, Str(what, kMaxNameBytes));
    return std::string(s);
  }

  absl::StatusOr<GgufValue> Value(const std::string& key, uint32_t raw_type) {
    const std::string what = StrCat("the value of '", key, "'");
    if (!KnownType(raw_type)) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat("'", key, "' has unknown value type ", raw_type));
    }
    GgufValue value;
    value.type_ = static_cast<GgufType>(raw_type);
    if (value.type_ == GgufType::kString) {
      LOOM_ASSIGN_OR_RETURN(std::string_view s, Str(what, Remaining()));
      value.data_ = reinterpret_cast<const uint8_t*>(s.data());
      value.count_ = static_cast<int64_t>(s.size());
      return value;
    }
    if (value.type_ != GgufType::kArray) {
      const int64_t n = ScalarBytes(value.type_);
      LOOM_RETURN_IF_ERROR(Need(n, what));
      value.data_ = bytes_.data() + pos_;
      pos_ += n;
      return value;
    }
    LOOM_ASSIGN_OR_RETURN(const uint32_t element, U32(StrCat("the element type of '", key, "'")));
    if (!KnownType(element) || element == static_cast<uint32_t>(GgufType::kArray)) {
      return Error(
          absl::StatusCode::kInvalidArgument,
          StrCat("'", key, "' is an array of ",
                 KnownType(element) ? "arrays (not supported)" : StrCat("unknown type ", element)));
    }
    value.element_type_ = static_cast<GgufType>(element);
    LOOM_ASSIGN_OR_RETURN(const uint64_t count, U64(StrCat("the length of '", key, "'")));
    if (value.element_type_ == GgufType::kString) {
      if (count > Remaining() / 8) {
        return Error(absl::StatusCode::kDataLoss,
                     StrCat("'", key, "' promises ", count, " strings, more than the file holds"));
      }
      value.strings_.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        LOOM_ASSIGN_OR_RETURN(std::string_view s, Str(what, Remaining()));
        value.strings_.push_back(s);
      }
    } else {
      const uint64_t size = static_cast<uint64_t>(ScalarBytes(value.element_type_));
      if (count > Remaining() / size) {
        return Error(absl::StatusCode::kDataLoss,
                     StrCat("'", key, "' promises ", count, " elements, more than the file holds"));
      }
      value.data_ = bytes_.data() + pos_;
      pos_ += count * size;
    }
    value.count_ = static_cast<int64_t>(count);
    return value;
  }

  absl::StatusOr<GgufTensor> TensorInfoAt(uint64_t index) {
    GgufTensor t;
    LOOM_ASSIGN_OR_RETURN(t.name, Name(StrCat("the name of tensor ", index)));
    const std::string what = StrCat("tensor '", t.name, "'");
    LOOM_ASSIGN_OR_RETURN(const uint32_t n_dims, U32(what));
    if (n_dims < 1 || n_dims > kMaxDims) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat(what, " has ", n_dims, " dims (1 to ", kMaxDims, " supported)"));
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      LOOM_ASSIGN_OR_RETURN(const uint64_t dim, U64(what));
      if (dim > static_cast<uint64_t>(INT64_MAX) ||
          (dim != 0 && static_cast<uint64_t>(elements) > static_cast<uint64_t>(INT64_MAX) / dim)) {
        return Error(absl::StatusCode::kInvalidArgument,
                     StrCat(what, " has dims whose product overflows"));
      }
      t.dims.push_back(static_cast<int64_t>(dim));
      elements *= static_cast<int64_t>(dim);
    }
    t.shape.assign(t.dims.rbegin(), t.dims.rend());
    LOOM_ASSIGN_OR_RETURN(t.ggml_type, U32(what));
    LOOM_ASSIGN_OR_RETURN(t.offset, U64(what));
    const std::optional<DType> dtype = DTypeFromGgmlType(t.ggml_type);
    if (!dtype) {
      return Error(FindGgmlType(t.ggml_type) != nullptr ? absl::StatusCode::kUnimplemented
                                                        : absl::StatusCode::kInvalidArgument,
                   StrCat(what, " has type ", GgmlTypeName(t.ggml_type),
                          ", which loom does not run (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, "
                          "Q5_K and Q6_K are supported)"));
    }
    t.dtype = *dtype;
    if (!RowFitsBlocks(t.dtype, t.dims[0])) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat(what, " rows of ", t.dims[0], " elements are not whole ",
                          GgmlTypeName(t.ggml_type), " blocks of ", TraitsOf(t.dtype).block_elems));
    }
    if (t.offset % static_cast<uint64_t>(file_.alignment_) != 0) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat(what, " data offset ", t.offset, " is not a multiple of the alignment ",
                          file_.alignment_));
    }
    // Bytes = rows * row bytes, each step checked for overflow.
    const DTypeTraits traits = TraitsOf(t.dtype);
    if (t.dims[0] / traits.block_elems > INT64_MAX / traits.block_bytes) {
      return Error(absl::StatusCode::kInvalidArgument, StrCat(what, " is too large"));
    }
    const int64_t rows = t.dims[0] == 0 ? 0 : elements / t.dims[0];
    const int64_t row_bytes = DTypeRowBytes(t.dtype, t.dims[0]);
    if (row_bytes != 0 && rows > INT64_MAX / row_bytes) {
      return Error(absl::StatusCode::kInvalidArgument, StrCat(what, " is too large"));
    }
    t.num_bytes = rows * row_bytes;
    return t;
  }

  GgufFile& file_;
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

std::string_view GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "?";
}

std::optional<int64_t> GgufValue::Int() const { return LoadInt(type_, data_); }

std::optional<double> GgufValue::Float() const { return LoadFloat(type_, data_); }

std::optional<bool> GgufValue::Bool() const {
  if (type_ != GgufType::kBool) return std::nullopt;
  return data_[0] != 0;
}

std::optional<std::string_view> GgufValue::String() const {
  if (type_ != GgufType::kString) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(data_), static_cast<size_t>(count_));
}

std::optional<int64_t> GgufValue::IntAt(int64_t index) const {
  if (type_ != GgufType::kArray || index < 0 || index >= count_ ||
      element_type_ == GgufType::kString) {
    return std::nullopt;
  }
  return LoadInt(element_type_, data_ + index * ScalarBytes(element_type_));
}

std::optional<double> GgufValue::FloatAt(int64_t index) const {
  if (type_ != GgufType::kArray || index < 0 || index >= count_ ||
      element_type_ == GgufType::kString) {
    return std::nullopt;
  }
  return LoadFloat(element_type_, data_ + index * ScalarBytes(element_type_));
}

std::optional<std::string_view> GgufValue::StringAt(int64_t index) const {
  if (type_ != GgufType::kArray || element_type_ != GgufType::kString || index < 0 ||
      index >= count_) {
    return std::nullopt;
  }
  return strings_[static_cast<size_t>(index)];
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                         const MapOptions& options) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // no hang on a FIFO
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(StrCat(path, ": no such file"));
    return absl::ErrnoToStatus(error, StrCat(path, ": cannot open"));
  }
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || info.st_size < 4) {
    close(fd);
    return absl::InvalidArgumentError(
        StrCat(path, ": not a regular file of at least 4 bytes: not a GGUF file"));
  }
  const size_t size = static_cast<size_t>(info.st_size);
  absl::StatusOr<FileBytes> bytes = MapFileBytes(fd, size, path, options);
  close(fd);
  if (!bytes.ok()) return bytes.status();
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->file_ = *bytes;
  file->bytes_ = std::span<const uint8_t>(static_cast<const uint8_t*>(bytes->data), size);
  LOOM_RETURN_IF_ERROR(GgufParser(*file).Run());
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes,
                                                          std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(name);
  file->bytes_ = bytes;
  LOOM_RETURN_IF_ERROR(GgufParser(*file).Run());
  return file;
}

GgufFile::~GgufFile() {
  UnmapFileBytes(file_);
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  for (const auto& [name, value] : metadata_) {
    if (name == key) return &value;
  }
  return nullptr;
}

std::optional<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v == nullptr ? std::nullopt : v->Int();
}

std::optional<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return std::nullopt;
  if (std::optional<double> f = v->Float()) return f;
  if (std::optional<int64_t> i = v->Int()) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v == nullptr ? std::nullopt : v->Bool();
}

std::optional<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v == nullptr ? std::nullopt : v->String();
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  for (const GgufTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::optional<DType> DTypeFromGgmlType(uint32_t ggml_type) {
  const GgmlTypeEntry* entry = FindGgmlType(ggml_type);
  return entry == nullptr ? std::nullopt : entry->dtype;
}

std::string GgmlTypeName(uint32_t ggml_type) {
  const GgmlTypeEntry* entry = FindGgmlType(ggml_type);
  return entry == nullptr ? StrCat("type ", ggml_type) : std::string(entry->name);
}

bool IsGgufFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat info;
  char magic[4] = {};
  const bool is = fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && read(fd, magic, 4) == 4 &&
                  std::memcmp(magic, "GGUF", 4) == 0;
  close(fd);
  return is;
}

}  // namespace loom
