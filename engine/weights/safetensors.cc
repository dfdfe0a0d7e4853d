#include "engine/weights/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "engine/common/json.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

constexpr int64_t kHeaderLengthBytes = 8;
constexpr int64_t kMinHeaderBytes = 2;  // "{}"
constexpr int64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeNameEntry {
  std::string_view name;
  DType dtype;
};
constexpr std::array<DTypeNameEntry, 10> kSupportedDTypes = {{
    {"F64", DType::kF64},
    {"F32", DType::kF32},
    {"F16", DType::kF16},
    {"BF16", DType::kBF16},
    {"I64", DType::kI64},
    {"I32", DType::kI32},
    {"I16", DType::kI16},
    {"I8", DType::kI8},
    {"U8", DType::kU8},
    {"BOOL", DType::kBool},
}};
// Defined by safetensors but not loaded by loom: refused as Unimplemented rather than malformed.
constexpr std::array<std::string_view, 12> kKnownUnsupportedDTypes = {
    "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "F6_E2M3",
    "F6_E3M2", "F4",      "U16",         "U32",         "U64",     "C64",
};

// A header entry before its pointer is known; offsets are relative to the data section.
struct Entry {
  TensorInfo info;
  int64_t begin = 0;
  int64_t end = 0;
};

absl::Status FileError(absl::StatusCode code, std::string_view path, std::string_view message) {
  return absl::Status(code, StrCat(path, ": ", message));
}

absl::Status TensorError(absl::StatusCode code, std::string_view path, std::string_view tensor,
                         std::string_view message) {
  return absl::Status(code, StrCat(path, ": tensor '", tensor, "': ", message));
}

std::string Range(int64_t begin, int64_t end) { return StrCat("[", begin, ", ", end, ")"); }

absl::StatusOr<DType> ParseDType(std::string_view path, std::string_view name, const Json& entry) {
  std::optional<Json> field = entry.Find("dtype");
  if (!field) return TensorError(absl::StatusCode::kInvalidArgument, path, name, "no 'dtype'");
  if (!field->IsString()) {
    return TensorError(absl::StatusCode::kInvalidArgument, path, name,
                       StrCat("'dtype' is ", field->Dump(), ", expected a string"));
  }
  const std::string dtype_name = *field->AsString();
  if (std::optional<DType> dtype = DTypeFromSafetensorsName(dtype_name)) return *dtype;
  const bool known = std::find(kKnownUnsupportedDTypes.begin(), kKnownUnsupportedDTypes.end(),
                               dtype_name) != kKnownUnsupportedDTypes.end();
  if (known) {
    return TensorError(absl::StatusCode::kUnimplemented, path, name,
                       StrCat("unsupported dtype ", dtype_name,
                              " (loom reads F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)"));
  }
  return TensorError(absl::StatusCode::kInvalidArgument, path, name,
                     StrCat("unknown dtype '", dtype_name, "'"));
}

// Reads `entry[key]` as an array of non-negative integers.
absl::StatusOr<std::vector<int64_t>> ParseIntArray(std::string_view path, std::string_view name,
                                                   const Json& entry, std::string_view key) {
  std::optional<Json> field = entry.Find(key);
  if (!field) {
    return TensorError(absl::StatusCode::kInvalidArgument, path, name, StrCat("no '", key, "'"));
  }
  if (!field->IsArray()) {
    return TensorError(absl::StatusCode::kInvalidArgument, path, name,
                       StrCat("'", key, "' is ", field->Dump(), ", expected an array"));
  }
  std::vector<int64_t> values;
  values.reserve(field->size());
  for (size_t i = 0; i < field->size(); ++i) {
    const Json element = (*field)[i];
    absl::StatusOr<int64_t> value = absl::InvalidArgumentError("not an integer");
    if (element.IsInteger()) value = element.AsInt();
    if (!value.ok() || *value < 0) {
      return TensorError(
          absl::StatusCode::kInvalidArgument, path, name,
          StrCat("'", key, "'[", i, "] is ", element.Dump(), ", expected a non-negative integer"));
    }
    values.push_back(*value);
  }
  return values;
}

// Checks that the shape's bytes, computed without overflow, equal the offsets' range.
absl::Status CheckSize(std::string_view path, const Entry& entry) {
  int64_t num_bytes = static_cast<int64_t>(DTypeSize(entry.info.dtype));
  for (int64_t dim : entry.info.shape) {
    if (__builtin_mul_overflow(num_bytes, dim, &num_bytes)) {
      return TensorError(
          absl::StatusCode::kInvalidArgument, path, entry.info.name,
          StrCat("shape ", FormatShape(entry.info.shape), " of ",
                 SafetensorsDTypeName(entry.info.dtype), " overflows a 64-bit byte count"));
    }
  }
  if (num_bytes != entry.end - entry.begin) {
    return TensorError(absl::StatusCode::kInvalidArgument, path, entry.info.name,
                       StrCat("shape ", FormatShape(entry.info.shape), " of ",
                              SafetensorsDTypeName(entry.info.dtype), " needs ", num_bytes,
                              " bytes, but data_offsets ", Range(entry.begin, entry.end), " hold ",
                              entry.end - entry.begin));
  }
  return absl::OkStatus();
}

absl::StatusOr<Entry> ParseEntry(std::string_view path, const std::string& name, const Json& value,
                                 int64_t data_bytes) {
  if (!value.IsObject()) {
    return TensorError(absl::StatusCode::kInvalidArgument, path, name,
                       StrCat("entry is ", value.Dump(), ", expected an object"));
  }
  Entry entry;
  entry.info.name = name;
  entry.info.file = std::string(path);
  LOOM_ASSIGN_OR_RETURN(entry.info.dtype, ParseDType(path, name, value));
  LOOM_ASSIGN_OR_RETURN(entry.info.shape, ParseIntArray(path, name, value, "shape"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> offsets,
                        ParseIntArray(path, name, value, "data_offsets"));
  if (offsets.size() != 2 || offsets[0] > offsets[1]) {
    return TensorError(absl::StatusCode::kInvalidArgument, path, name,
                       StrCat("data_offsets ", value.Find("data_offsets")->Dump(),
                              " is not [begin, end] with begin <= end"));
  }
  entry.begin = offsets[0];
  entry.end = offsets[1];
  LOOM_RETURN_IF_ERROR(CheckSize(path, entry));
  if (entry.end > data_bytes) {
    return TensorError(absl::StatusCode::kDataLoss, path, name,
                       StrCat("data_offsets ", Range(entry.begin, entry.end),
                              " run past the end of the data section (", data_bytes,
                              " bytes): the file is truncated"));
  }
  entry.info.num_bytes = entry.end - entry.begin;
  return entry;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(std::string_view path,
                                                                 const Json& value) {
  std::map<std::string, std::string> metadata;
  if (value.IsNull()) return metadata;
  if (!value.IsObject()) {
    return FileError(absl::StatusCode::kInvalidArgument, path,
                     StrCat("'__metadata__' is ", value.Dump(), ", expected an object"));
  }
  for (const auto& [key, item] : value.Items()) {
    if (!item.IsString()) {
      return FileError(
          absl::StatusCode::kInvalidArgument, path,
          StrCat("'__metadata__' value of '", key, "' is ", item.Dump(), ", expected a string"));
    }
    metadata.emplace(key, *item.AsString());
  }
  return metadata;
}

// `entries` sorted by (begin, end): each range must start where the previous one ended, and the
// last must end at the end of the data section, as the reference implementation requires.
absl::Status CheckCoverage(std::string_view path, const std::vector<Entry>& entries,
                           int64_t data_bytes) {
  int64_t next = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.begin < next) {
      return TensorError(
          absl::StatusCode::kInvalidArgument, path, entry.info.name,
          StrCat("data_offsets ", Range(entry.begin, entry.end), " overlap tensor '",
                 previous->info.name, "' at ", Range(previous->begin, previous->end)));
    }
    if (entry.begin > next) {
      return TensorError(
          absl::StatusCode::kInvalidArgument, path, entry.info.name,
          StrCat("data_offsets ", Range(entry.begin, entry.end), " leave a hole: bytes ",
                 Range(next, entry.begin), " of the data section belong to no tensor"));
    }
    next = entry.end;
    previous = &entry;
  }
  if (next != data_bytes) {
    return FileError(absl::StatusCode::kInvalidArgument, path,
                     StrCat("bytes ", Range(next, data_bytes), " of the data section",
                            previous ? StrCat(" after tensor '", previous->info.name, "'") : "",
                            " belong to no tensor"));
  }
  return absl::OkStatus();
}

// The 8-byte little-endian header length, checked against the limits and the file size.
absl::StatusOr<int64_t> ReadHeaderLength(std::string_view path, const unsigned char* bytes,
                                         int64_t file_bytes) {
  uint64_t header_bytes = 0;
  for (int i = kHeaderLengthBytes - 1; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
  if (header_bytes < kMinHeaderBytes || header_bytes > kMaxHeaderBytes) {
    return FileError(absl::StatusCode::kInvalidArgument, path,
                     StrCat("header length ", header_bytes, " is outside [", kMinHeaderBytes, ", ",
                            kMaxHeaderBytes, "]: not a safetensors file"));
  }
  if (static_cast<int64_t>(header_bytes) > file_bytes - kHeaderLengthBytes) {
    return FileError(absl::StatusCode::kDataLoss, path,
                     StrCat("header length ", header_bytes, " runs past the end of the file (",
                            file_bytes, " bytes): truncated or not a safetensors file"));
  }
  return static_cast<int64_t>(header_bytes);
}

absl::StatusOr<Json> ParseHeaderJson(std::string_view path, std::string_view text) {
  absl::StatusOr<Json> header = Json::Parse(text, "header");
  if (!header.ok()) {
    return FileError(absl::StatusCode::kInvalidArgument, path,
                     std::string(header.status().message()));
  }
  if (!header->IsObject()) {
    return FileError(absl::StatusCode::kInvalidArgument, path,
                     "header is not a JSON object of tensors");
  }
  return header;
}

}  // namespace

int64_t TensorInfo::NumElements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::optional<DType> DTypeFromSafetensorsName(std::string_view name) {
  for (const DTypeNameEntry& entry : kSupportedDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::string_view SafetensorsDTypeName(DType dtype) {
  for (const DTypeNameEntry& entry : kSupportedDTypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return DTypeName(dtype);  // a format safetensors has no name for (a GGUF block format)
}

std::string FormatShape(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += StrCat(i ? ", " : "", shape[i]);
  return out + "]";
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path,
                                                                       const MapOptions& options) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // no hang on a FIFO
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return FileError(absl::StatusCode::kNotFound, path, "no such file");
    return absl::ErrnoToStatus(error, StrCat(path, ": cannot open"));
  }
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return absl::ErrnoToStatus(error, StrCat(path, ": cannot stat"));
  }
  if (!S_ISREG(info.st_mode)) {
    close(fd);
    return FileError(absl::StatusCode::kInvalidArgument, path, "not a regular file");
  }
  const int64_t file_bytes = info.st_size;
  if (file_bytes < kHeaderLengthBytes + kMinHeaderBytes) {
    close(fd);
    return FileError(absl::StatusCode::kDataLoss, path,
                     StrCat("file is ", file_bytes,
                            " bytes, too short for a safetensors header: "
                            "truncated or not a safetensors file"));
  }
  absl::StatusOr<FileBytes> bytes =
      MapFileBytes(fd, static_cast<size_t>(file_bytes), path, options);
  close(fd);
  if (!bytes.ok()) return bytes.status();
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(path, *bytes));
  LOOM_RETURN_IF_ERROR(file->ParseAndValidate());
  return file;
}

SafetensorsFile::SafetensorsFile(std::string path, const FileBytes& file)
    : path_(std::move(path)), file_(file) {}

SafetensorsFile::~SafetensorsFile() { UnmapFileBytes(file_); }

absl::Status SafetensorsFile::ParseAndValidate() {
  const auto* bytes = static_cast<const unsigned char*>(file_.data);
  LOOM_ASSIGN_OR_RETURN(const int64_t header_bytes, ReadHeaderLength(path_, bytes, file_bytes()));
  data_offset_ = kHeaderLengthBytes + header_bytes;
  const int64_t data_bytes = file_bytes() - data_offset_;
  LOOM_ASSIGN_OR_RETURN(
      const Json header,
      ParseHeaderJson(path_,
                      std::string_view(reinterpret_cast<const char*>(bytes) + kHeaderLengthBytes,
                                       static_cast<size_t>(header_bytes))));
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.Items()) {
    if (name == kMetadataKey) {
      LOOM_ASSIGN_OR_RETURN(metadata_, ParseMetadata(path_, value));
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(Entry entry, ParseEntry(path_, name, value, data_bytes));
    entry.info.data = bytes + data_offset_ + entry.begin;
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.info.name) < std::tie(b.begin, b.end, b.info.name);
  });
  LOOM_RETURN_IF_ERROR(CheckCoverage(path_, entries, data_bytes));
  tensors_.reserve(entries.size());
  for (Entry& entry : entries) tensors_.push_back(std::move(entry.info));
  by_name_.resize(tensors_.size());
  for (uint32_t i = 0; i < by_name_.size(); ++i) by_name_[i] = i;
  std::sort(by_name_.begin(), by_name_.end(),
            [this](uint32_t a, uint32_t b) { return tensors_[a].name < tensors_[b].name; });
  return absl::OkStatus();
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [this](uint32_t index, std::string_view key) {
                               return std::string_view(tensors_[index].name) < key;
                             });
  if (it == by_name_.end() || tensors_[*it].name != name) return nullptr;
  return &tensors_[*it];
}

}  // namespace loom
