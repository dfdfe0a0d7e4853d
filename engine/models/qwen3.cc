// Qwen3ForCausalLM: the Llama layout with an RMSNorm over head_dim on every q and k head before
// RoPE, head_dim 128 unless the config says otherwise, biases on all four attention projections
// when attention_bias is set, and optional sliding-window layers.
#include "engine/common/status.h"
#include "engine/models/architecture.h"

namespace loom {

absl::StatusOr<ModelConfig> ParseQwen3Config(const Json& config) {
  DecoderDefaults defaults;
  defaults.max_position_embeddings = 32768;
  defaults.head_dim = 128;
  LOOM_ASSIGN_OR_RETURN(ModelConfig model, ParseDecoderConfig(config, defaults));
  LOOM_ASSIGN_OR_RETURN(const bool attention_bias, config.GetBool("attention_bias", false));
  model.qkv_bias = attention_bias;
  model.o_proj_bias = attention_bias;
  model.qk_norm = true;
  LOOM_RETURN_IF_ERROR(ParseQwenSlidingWindow(config, model));
  return model;
}

}  // namespace loom
