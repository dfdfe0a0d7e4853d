// MistralForCausalLM: the Llama layout with an optional sliding attention window on every layer.
// Mistral's configuration class defaults `sliding_window` to 4096 when the key is absent;
// Mistral 7B v0.2 and later set it to null (full attention).
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/models/architecture.h"

namespace loom {

absl::StatusOr<ModelConfig> ParseMistralConfig(const Json& config) {
  DecoderDefaults defaults;
  defaults.max_position_embeddings = 4096 * 32;
  LOOM_ASSIGN_OR_RETURN(ModelConfig model, ParseDecoderConfig(config, defaults));
  int64_t window = 4096;
  if (std::optional<Json> node = config.Find("sliding_window")) {
    if (node->IsNull()) {
      window = 0;
    } else {
      LOOM_ASSIGN_OR_RETURN(window, node->AsInt());
      if (window <= 0) {
        return absl::InvalidArgumentError(
            StrCat("sliding_window must be positive or null, got ", window));
      }
    }
  }
  // A window at least as long as the context never cuts anything off.
  if (window >= model.max_position_embeddings) window = 0;
  model.layer_sliding_window.assign(model.num_layers, static_cast<int32_t>(window));
  return model;
}

}  // namespace loom
