#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/models/architecture.h"

namespace loom {

const std::vector<Architecture>& Architectures() {
  static const std::vector<Architecture> kArchitectures = {
      {"LlamaForCausalLM", &ParseLlamaConfig},
      {"MistralForCausalLM", &ParseMistralConfig},
      {"Qwen2ForCausalLM", &ParseQwen2Config},
      {"Qwen3ForCausalLM", &ParseQwen3Config},
      {"MixtralForCausalLM", &ParseMixtralConfig},
      {"Qwen2MoeForCausalLM", &ParseQwen2MoeConfig},
      {"Qwen3MoeForCausalLM", &ParseQwen3MoeConfig},
  };
  return kArchitectures;
}

namespace {

absl::StatusOr<ModelConfig> ParseArchitecture(const Json& config) {
  std::optional<Json> list = config.Find("architectures");
  if (!list || !list->IsArray() || list->size() == 0) {
    return absl::InvalidArgumentError(
        "'architectures' must be a non-empty list naming the model class");
  }
  LOOM_ASSIGN_OR_RETURN(const std::string name, (*list)[0].AsString());
  std::string supported;
  for (const Architecture& arch : Architectures()) {
    if (arch.name == name) return arch.parse_config(config);
    supported = StrCat(supported, supported.empty() ? "" : ", ", arch.name);
  }
  return absl::UnimplementedError(
      StrCat("architecture '", name, "' is not supported (supported: ", supported, ")"));
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const Json& config) {
  absl::StatusOr<ModelConfig> model = ParseArchitecture(config);
  if (model.ok()) return model;
  return absl::Status(model.status().code(), StrCat("config.json: ", model.status().message()));
}

}  // namespace loom
