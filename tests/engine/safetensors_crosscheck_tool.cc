// Command-line access to loom's safetensors reader and writer for the cross-check against the
// official Python library (tests/engine/safetensors_crosscheck.py, which runs this tool).
//
//   safetensors_crosscheck_tool dump <file or model folder>
//       One line per metadata entry and per tensor (names and bytes in hex, so no escaping):
//         meta <hex key> <hex value>
//         tensor <hex name> <DTYPE> <dim,dim,...> <hex bytes>
//   safetensors_crosscheck_tool copy <in file> <out file>
//       Reads <in> and writes its tensors, in reverse file order, and metadata to <out>.
//   safetensors_crosscheck_tool reshard <in file> <out folder> <max shard bytes>
//       Reads <in> and writes its tensors as a sharded checkpoint folder.
// Exits 1 with the Status on stderr when loom refuses a file, 2 on a usage error.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/common/strings.h"
#include "engine/weights/checkpoint.h"
#include "engine/weights/safetensors.h"
#include "engine/weights/safetensors_writer.h"

namespace loom {
namespace {

std::string Hex(const void* data, size_t num_bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve(2 * num_bytes);
  for (size_t i = 0; i < num_bytes; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

std::string Hex(std::string_view text) { return Hex(text.data(), text.size()); }

absl::Status Dump(const std::string& path) {
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(path);
  if (!checkpoint.ok()) return checkpoint.status();
  for (const auto& [key, value] : checkpoint->files().front()->metadata()) {
    std::cout << "meta " << Hex(key) << " " << Hex(value) << "\n";
  }
  for (const TensorInfo* tensor : checkpoint->tensors()) {
    std::string dims;
    for (size_t i = 0; i < tensor->shape.size(); ++i) {
      dims += StrCat(i ? "," : "", tensor->shape[i]);
    }
    std::cout << "tensor " << Hex(tensor->name) << " " << SafetensorsDTypeName(tensor->dtype) << " "
              << (dims.empty() ? "-" : dims) << " "
              << (tensor->num_bytes ? Hex(tensor->data, tensor->num_bytes) : "-") << "\n";
  }
  return absl::OkStatus();
}

// The tensors of `file`, in reverse file order, pointing into its mapping.
std::vector<TensorToWrite> Reversed(const SafetensorsFile& file) {
  std::vector<TensorToWrite> tensors;
  for (auto it = file.tensors().rbegin(); it != file.tensors().rend(); ++it) {
    tensors.push_back({.name = it->name, .dtype = it->dtype, .shape = it->shape, .data = it->data});
  }
  return tensors;
}

absl::Status Rewrite(const std::string& in, const std::string& out, int64_t max_shard_bytes) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(in);
  if (!file.ok()) return file.status();
  const std::vector<TensorToWrite> tensors = Reversed(**file);
  if (max_shard_bytes > 0) {
    return WriteShardedCheckpoint(out, tensors, max_shard_bytes, (*file)->metadata());
  }
  return WriteSafetensors(out, tensors, (*file)->metadata());
}

int Main(const std::vector<std::string>& args) {
  absl::Status status;
  if (args.size() == 2 && args[0] == "dump") {
    status = Dump(args[1]);
  } else if (args.size() == 3 && args[0] == "copy") {
    status = Rewrite(args[1], args[2], 0);
  } else if (args.size() == 4 && args[0] == "reshard" && std::atoll(args[3].c_str()) > 0) {
    status = Rewrite(args[1], args[2], std::atoll(args[3].c_str()));
  } else {
    std::cerr << "usage: dump PATH | copy IN OUT | reshard IN OUT_DIR MAX_SHARD_BYTES\n";
    return 2;
  }
  std::cout.flush();
  if (status.ok()) return 0;
  std::cerr << status << "\n";
  return 1;
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  return loom::Main(std::vector<std::string>(argv + 1, argv + argc));
}
