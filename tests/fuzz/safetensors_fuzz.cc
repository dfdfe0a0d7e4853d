// libFuzzer target for the safetensors reader: arbitrary bytes as a .safetensors file. Open must
// fail with a Status or succeed; a file that opens must keep its promise that every tensor's
// `data` points at exactly `num_bytes` readable bytes inside the file and NumElements() times the
// dtype size equals num_bytes (an out-of-mapping read crashes the fuzzer).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/weights/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader maps a path, so the input goes through a file of this process's own.
  static const std::string path = "/tmp/loom_safetensors_fuzz." + std::to_string(getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);

  auto file = loom::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  uint64_t checksum = 0;
  for (const loom::TensorInfo& t : (*file)->tensors()) {
    if (t.num_bytes < 0 || (*file)->Find(t.name) == nullptr) std::abort();
    if (t.NumElements() * static_cast<int64_t>(loom::DTypeSize(t.dtype)) != t.num_bytes) {
      std::abort();
    }
    const auto* bytes = static_cast<const uint8_t*>(t.data);
    if (t.num_bytes > 0) checksum += bytes[0] + bytes[t.num_bytes - 1];
  }
  if ((*file)->data_offset() > (*file)->file_bytes()) std::abort();
  // Keep the reads.
  if (checksum == 0xFFFFFFFFFFFFFFFFull) std::puts("");
  return 0;
}
