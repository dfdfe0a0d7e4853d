// Qwen3MoeForCausalLM (Qwen3-30B-A3B, Qwen3-235B-A22B): the Qwen3 attention (per-head q/k RMSNorm,
// biases on q/k/v/o when attention_bias) with a sparse block in the layers decoder_sparse_step and
// mlp_only_layers select (no shared expert). Unlike Qwen3, head_dim defaults to hidden_size /
// num_attention_heads when the config leaves it out.
#include "engine/common/status.h"
#include "engine/models/architecture.h"

namespace loom {

absl::StatusOr<ModelConfig> ParseQwen3MoeConfig(const Json& config) {
  DecoderDefaults defaults;
  defaults.max_position_embeddings = 32768;
  LOOM_ASSIGN_OR_RETURN(ModelConfig model, ParseDecoderConfig(config, defaults));
  LOOM_ASSIGN_OR_RETURN(const bool attention_bias, config.GetBool("attention_bias", false));
  model.qkv_bias = attention_bias;
  model.o_proj_bias = attention_bias;
  model.qk_norm = true;
  LOOM_RETURN_IF_ERROR(ParseQwenMoe(config, /*shared_expert=*/false,
                                    /*either_experts_name=*/true, model));
  return model;
}

}  // namespace loom
