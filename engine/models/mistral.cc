// MistralForCausalLM: the Llama layout with an optional sliding attention window on every layer.
// Mistral's configuration class defaults `sliding_window` to 4096 when the key is absent;
// Mistral 7B v0.2 and later set it to null (full attention).
#include "engine/common/status.h"
#include "engine/models/architecture.h"

namespace loom {

absl::StatusOr<ModelConfig> ParseMistralConfig(const Json& config) {
  DecoderDefaults defaults;
  defaults.max_position_embeddings = 4096 * 32;
  LOOM_ASSIGN_OR_RETURN(ModelConfig model, ParseDecoderConfig(config, defaults));
  LOOM_RETURN_IF_ERROR(ParseSlidingWindowAllLayers(config, /*default_window=*/4096, model));
  return model;
}

}  // namespace loom
