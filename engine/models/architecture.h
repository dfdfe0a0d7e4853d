// The registry of supported architectures: config.json's `architectures[0]` -> the function
// that turns that config into a ModelConfig (refusing options it does not implement).
//
// Adding an architecture: one file engine/models/<arch>.cc defining its parse function, and one
// line in engine/models/registry.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/json.h"
#include "engine/models/model_config.h"

namespace loom {

using ParseConfigFn = absl::StatusOr<ModelConfig> (*)(const Json& config);

struct Architecture {
  std::string_view name;  // as in config.json, e.g. "LlamaForCausalLM"
  ParseConfigFn parse_config;
};

// Every supported architecture.
const std::vector<Architecture>& Architectures();

// Parses config.json text: finds the architecture and runs its parser. An unknown architecture
// is an Unimplemented error that lists the supported ones. Every error message starts with
// "config.json: ".
absl::StatusOr<ModelConfig> ParseModelConfig(const Json& config);

// The parse functions, one per file. Their messages name the key at fault, not the file.
absl::StatusOr<ModelConfig> ParseLlamaConfig(const Json& config);
absl::StatusOr<ModelConfig> ParseMistralConfig(const Json& config);
absl::StatusOr<ModelConfig> ParseQwen2Config(const Json& config);
absl::StatusOr<ModelConfig> ParseQwen3Config(const Json& config);
absl::StatusOr<ModelConfig> ParseMixtralConfig(const Json& config);
absl::StatusOr<ModelConfig> ParseQwen2MoeConfig(const Json& config);
absl::StatusOr<ModelConfig> ParseQwen3MoeConfig(const Json& config);

}  // namespace loom
