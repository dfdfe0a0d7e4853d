// libFuzzer target for the GGUF reader and its Hugging Face view: arbitrary bytes as a .gguf
// file. Parse must fail with a Status or succeed; a file that parses must keep its promises (every
// tensor's bytes inside the input, metadata strings inside the input), and building the config
// JSON and the tensor view from it must not crash whatever the metadata says.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "engine/weights/gguf.h"
#include "engine/weights/gguf_model.h"

namespace {

bool Inside(const void* p, int64_t n, const uint8_t* data, size_t size) {
  const auto* b = static_cast<const uint8_t*>(p);
  return n >= 0 && b >= data && b + n <= data + size;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = loom::GgufFile::Parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) return 0;
  uint64_t checksum = 0;
  for (const loom::GgufTensor& t : (*file)->tensors()) {
    if (!Inside(t.data, t.num_bytes, data, size)) std::abort();
    if (t.num_bytes > 0) checksum += static_cast<const uint8_t*>(t.data)[t.num_bytes - 1];
  }
  for (const auto& [key, value] : (*file)->metadata()) {
    if (value.type() == loom::GgufType::kArray) {
      for (int64_t i = 0; i < value.size() && i < 64; ++i) {
        if (auto s = value.StringAt(i)) checksum += s->size();
        if (auto v = value.IntAt(i)) checksum += static_cast<uint64_t>(*v);
      }
    } else if (auto s = value.String()) {
      if (!Inside(s->data(), static_cast<int64_t>(s->size()), data, size)) std::abort();
    }
  }
  auto config = loom::GgufConfigJson(**file);
  if (config.ok()) checksum += config->size();
  auto view = loom::MapGgufTensors(**file);
  if (view.ok()) checksum += (*view)->tensors.size();
  if (checksum == 0xFFFFFFFFFFFFFFFFull) std::puts("");
  return 0;
}
