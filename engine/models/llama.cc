// LlamaForCausalLM: Llama 2 and 3 (and 3.1/3.2 rope scaling), TinyLlama, and other checkpoints
// that use the plain Llama layout. Optional biases (attention_bias covers q/k/v and o, mlp_bias
// the three MLP projections), GQA, explicit head_dim, tied embeddings, linear and llama3 rope.
#include "engine/common/status.h"
#include "engine/models/architecture.h"

namespace loom {

absl::StatusOr<ModelConfig> ParseLlamaConfig(const Json& config) {
  DecoderDefaults defaults;
  defaults.max_position_embeddings = 2048;
  LOOM_ASSIGN_OR_RETURN(ModelConfig model, ParseDecoderConfig(config, defaults));
  LOOM_ASSIGN_OR_RETURN(const bool attention_bias, config.GetBool("attention_bias", false));
  model.qkv_bias = attention_bias;
  model.o_proj_bias = attention_bias;
  LOOM_ASSIGN_OR_RETURN(model.mlp_bias, config.GetBool("mlp_bias", false));
  return model;
}

}  // namespace loom
