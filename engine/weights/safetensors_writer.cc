#include "engine/weights/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string_view>
#include <utility>

#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/weights/safetensors.h"

namespace loom {
namespace {

constexpr size_t kBufferBytes = size_t{4} << 20;
constexpr size_t kHeaderAlignment = 8;

// A file written through a buffer with plain POSIX calls. Large writes bypass the buffer.
class OutputFile {
 public:
  explicit OutputFile(std::string path) : path_(std::move(path)) {}
  ~OutputFile() {
    if (fd_ >= 0) close(fd_);
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  absl::Status Open() {
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return absl::ErrnoToStatus(errno, StrCat(path_, ": cannot create"));
    buffer_ = std::make_unique<char[]>(kBufferBytes);
    return absl::OkStatus();
  }

  absl::Status Write(const void* data, size_t num_bytes) {
    if (buffered_ + num_bytes > kBufferBytes) LOOM_RETURN_IF_ERROR(Flush());
    if (num_bytes >= kBufferBytes) return WriteAll(static_cast<const char*>(data), num_bytes);
    if (num_bytes > 0) std::memcpy(buffer_.get() + buffered_, data, num_bytes);
    buffered_ += num_bytes;
    return absl::OkStatus();
  }

  // Flushes, syncs to disk and closes; the file is complete when this returns OK.
  absl::Status Close() {
    LOOM_RETURN_IF_ERROR(Flush());
    if (fsync(fd_) != 0) return absl::ErrnoToStatus(errno, StrCat(path_, ": cannot sync"));
    const int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) return absl::ErrnoToStatus(errno, StrCat(path_, ": cannot close"));
    return absl::OkStatus();
  }

 private:
  absl::Status Flush() {
    const size_t num_bytes = buffered_;
    buffered_ = 0;
    return WriteAll(buffer_.get(), num_bytes);
  }

  absl::Status WriteAll(const char* data, size_t num_bytes) {
    while (num_bytes > 0) {
      const ssize_t written = write(fd_, data, num_bytes);
      if (written < 0 && errno == EINTR) continue;
      if (written < 0) return absl::ErrnoToStatus(errno, StrCat(path_, ": cannot write"));
      data += written;
      num_bytes -= static_cast<size_t>(written);
    }
    return absl::OkStatus();
  }

  std::string path_;
  int fd_ = -1;
  std::unique_ptr<char[]> buffer_;
  size_t buffered_ = 0;
};

// Runs `body` on `<path>.tmp` and renames that over `path` when everything succeeded.
absl::Status WriteAtomically(const std::string& path,
                             const std::function<absl::Status(OutputFile&)>& body) {
  const std::string temp_path = StrCat(path, ".tmp");
  absl::Status status;
  {
    OutputFile file(temp_path);
    status = file.Open();
    if (!status.ok()) return status;
    status = body(file);
    if (status.ok()) status = file.Close();
  }
  if (status.ok() && rename(temp_path.c_str(), path.c_str()) != 0) {
    status = absl::ErrnoToStatus(errno, StrCat(path, ": cannot rename ", temp_path, " to it"));
  }
  if (!status.ok()) unlink(temp_path.c_str());
  return status;
}

// Length of the UTF-8 sequence that `lead` starts, 0 when it cannot start one.
size_t SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xe0) == 0xc0) return 2;
  if ((lead & 0xf0) == 0xe0) return 3;
  if ((lead & 0xf8) == 0xf0) return 4;
  return 0;
}

// Names and metadata must be valid UTF-8, or readers (ours, the official one) refuse the header.
bool IsValidUtf8(std::string_view text) {
  constexpr uint32_t kMinCode[] = {0, 0, 0x80, 0x800, 0x10000};  // below: an overlong form
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t length = SequenceLength(lead);
    if (length == 0 || i + length > text.size()) return false;
    uint32_t code = length == 1 ? lead : lead & (0x7fu >> length);
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    if (code < kMinCode[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
      return false;
    }
    i += length;
  }
  return true;
}

// Appends `text` (valid UTF-8) as a JSON string literal.
void AppendJsonString(std::string& out, std::string_view text) {
  out.push_back('"');
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
      out.append(escaped);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

absl::Status CheckText(std::string_view path, std::string_view what, std::string_view text) {
  if (IsValidUtf8(text)) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(path, ": ", what, " is not valid UTF-8"));
}

// Byte count of each tensor; checks names and shapes on the way.
absl::StatusOr<std::vector<int64_t>> TensorSizes(std::string_view path,
                                                 std::span<const TensorToWrite> tensors) {
  std::vector<int64_t> sizes;
  std::set<std::string_view> names;
  for (const TensorToWrite& tensor : tensors) {
    const std::string where = StrCat("tensor '", tensor.name, "'");
    LOOM_RETURN_IF_ERROR(CheckText(path, "a tensor name", tensor.name));
    if (tensor.name.empty() || tensor.name == "__metadata__" || !names.insert(tensor.name).second) {
      return absl::InvalidArgumentError(
          StrCat(path, ": ", where, ": name is empty, reserved or used twice"));
    }
    int64_t num_bytes = static_cast<int64_t>(DTypeSize(tensor.dtype));
    for (const int64_t dim : tensor.shape) {
      if (dim < 0 || __builtin_mul_overflow(num_bytes, dim, &num_bytes)) {
        return absl::InvalidArgumentError(
            StrCat(path, ": ", where, ": invalid shape ", FormatShape(tensor.shape)));
      }
    }
    sizes.push_back(num_bytes);
  }
  return sizes;
}

// The JSON header, padded with spaces to a multiple of 8 bytes.
absl::StatusOr<std::string> BuildHeader(std::string_view path,
                                        std::span<const TensorToWrite> tensors,
                                        std::span<const int64_t> sizes,
                                        const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      LOOM_RETURN_IF_ERROR(CheckText(path, StrCat("metadata key '", key, "'"), key));
      LOOM_RETURN_IF_ERROR(CheckText(path, StrCat("metadata value of '", key, "'"), value));
      if (header.back() != '{') header += ",";
      AppendJsonString(header, key);
      header += ":";
      AppendJsonString(header, value);
    }
    header += "}";
  }
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (header.size() > 1) header += ",";
    AppendJsonString(header, tensors[i].name);
    header += StrCat(":{\"dtype\":\"", SafetensorsDTypeName(tensors[i].dtype), "\",\"shape\":[");
    for (size_t d = 0; d < tensors[i].shape.size(); ++d) {
      header += StrCat(d ? "," : "", tensors[i].shape[d]);
    }
    if (__builtin_add_overflow(offset, sizes[i], &offset)) {
      return absl::InvalidArgumentError(StrCat(path, ": the tensors overflow a 64-bit size"));
    }
    header += StrCat("],\"data_offsets\":[", offset - sizes[i], ",", offset, "]}");
  }
  header += "}";
  header.append((kHeaderAlignment - header.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  return header;
}

absl::Status WriteTensor(std::string_view path, OutputFile& file, const TensorToWrite& tensor,
                         int64_t num_bytes) {
  if (tensor.data != nullptr) return file.Write(tensor.data, static_cast<size_t>(num_bytes));
  if (!tensor.produce) {
    if (num_bytes == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        StrCat(path, ": tensor '", tensor.name, "': neither data nor a producer"));
  }
  int64_t written = 0;
  const ByteSink sink = [&](const void* data, size_t chunk_bytes) -> absl::Status {
    if (chunk_bytes > static_cast<uint64_t>(num_bytes - written)) {
      return absl::InvalidArgumentError(StrCat(
          path, ": tensor '", tensor.name, "': producer wrote more than ", num_bytes, " bytes"));
    }
    written += static_cast<int64_t>(chunk_bytes);
    return file.Write(data, chunk_bytes);
  };
  LOOM_RETURN_IF_ERROR(tensor.produce(sink));
  if (written != num_bytes) {
    return absl::InvalidArgumentError(StrCat(path, ": tensor '", tensor.name, "': producer wrote ",
                                             written, " of ", num_bytes, " bytes"));
  }
  return absl::OkStatus();
}

std::string ShardName(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

// Splits `sizes` in order into [begin, end) runs of at most `max_bytes` (or one tensor).
std::vector<std::pair<size_t, size_t>> SplitShards(std::span<const int64_t> sizes,
                                                   int64_t max_bytes) {
  std::vector<std::pair<size_t, size_t>> shards;
  int64_t shard_bytes = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (shards.empty() || sizes[i] > max_bytes - shard_bytes) {  // no overflow
      shards.emplace_back(i, i);
      shard_bytes = 0;
    }
    shards.back().second = i + 1;
    shard_bytes += sizes[i];
  }
  return shards;
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                              const std::map<std::string, std::string>& metadata) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, TensorSizes(path, tensors));
  LOOM_ASSIGN_OR_RETURN(const std::string header, BuildHeader(path, tensors, sizes, metadata));
  return WriteAtomically(path, [&](OutputFile& file) -> absl::Status {
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
    LOOM_RETURN_IF_ERROR(file.Write(length, sizeof(length)));
    LOOM_RETURN_IF_ERROR(file.Write(header.data(), header.size()));
    for (size_t i = 0; i < tensors.size(); ++i) {
      LOOM_RETURN_IF_ERROR(WriteTensor(path, file, tensors[i], sizes[i]));
    }
    return absl::OkStatus();
  });
}

absl::Status WriteShardedCheckpoint(const std::string& dir, std::span<const TensorToWrite> tensors,
                                    int64_t max_shard_bytes,
                                    const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes <= 0) {
    return absl::InvalidArgumentError(StrCat(dir, ": max_shard_bytes must be positive"));
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::ErrnoToStatus(error.value(), StrCat(dir, ": cannot create the folder"));
  LOOM_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, TensorSizes(dir, tensors));
  const std::vector<std::pair<size_t, size_t>> shards = SplitShards(sizes, max_shard_bytes);
  if (shards.size() <= 1) {
    return WriteSafetensors(StrCat(dir, "/model.safetensors"), tensors, metadata);
  }

  std::string weight_map;
  int64_t total_bytes = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = ShardName(s, shards.size());
    const auto [begin, end] = shards[s];
    LOOM_RETURN_IF_ERROR(
        WriteSafetensors(StrCat(dir, "/", name), tensors.subspan(begin, end - begin), metadata));
    for (size_t i = begin; i < end; ++i) {
      weight_map += weight_map.empty() ? "\n    " : ",\n    ";
      AppendJsonString(weight_map, tensors[i].name);
      weight_map += StrCat(": \"", name, "\"");
      total_bytes += sizes[i];
    }
  }
  const std::string index = StrCat("{\n  \"metadata\": {\"total_size\": ", total_bytes,
                                   "},\n  \"weight_map\": {", weight_map, "\n  }\n}\n");
  return WriteAtomically(StrCat(dir, "/model.safetensors.index.json"),
                         [&](OutputFile& file) { return file.Write(index.data(), index.size()); });
}

}  // namespace loom
