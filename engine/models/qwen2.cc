// Qwen2ForCausalLM (Qwen2, Qwen2.5): the Llama layout with biases on the q/k/v projections (not on
// o_proj, not in the MLP) and optional sliding-window layers.
#include "engine/common/status.h"
#include "engine/models/architecture.h"

namespace loom {

absl::StatusOr<ModelConfig> ParseQwen2Config(const Json& config) {
  DecoderDefaults defaults;
  defaults.max_position_embeddings = 32768;
  LOOM_ASSIGN_OR_RETURN(ModelConfig model, ParseDecoderConfig(config, defaults));
  model.qkv_bias = true;
  LOOM_RETURN_IF_ERROR(ParseQwenSlidingWindow(config, model));
  return model;
}

}  // namespace loom
