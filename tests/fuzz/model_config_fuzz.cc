// libFuzzer target for a checkpoint's config.json (and, after a NUL byte if any,
// generation_config.json): the shared decoder keys, Qwen's sliding windows and the generation
// config's eos ids. Parsing must fail with a Status or give a consistent config, whatever the bytes.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/common/json.h"
#include "engine/models/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view generation;
  if (const size_t nul = input.find('\0'); nul != std::string_view::npos) {
    generation = input.substr(nul + 1);
    input = input.substr(0, nul);
  }
  auto json = loom::Json::Parse(input, "config.json");
  if (!json.ok()) return 0;
  auto config = loom::ParseDecoderConfig(*json, loom::DecoderDefaults{});
  if (!config.ok()) return 0;
  // What every consumer relies on once a config parsed.
  if (config->num_heads <= 0 || config->num_kv_heads <= 0 || config->head_dim <= 0 ||
      config->num_heads % config->num_kv_heads != 0 || config->vocab_size <= 0) {
    std::abort();
  }
  (void)loom::ParseQwenSlidingWindow(*json, *config);
  if (!generation.empty()) {
    auto gen = loom::Json::Parse(generation, "generation_config.json");
    if (gen.ok()) (void)loom::MergeGenerationConfig(*gen, *config);
  }
  return 0;
}
