// Qwen2MoeForCausalLM (Qwen1.5-MoE, Qwen2-57B-A14B): the Qwen2 layout (q/k/v biases, which the
// qkv_bias key may turn off) with a sparse block in the layers decoder_sparse_step and
// mlp_only_layers select: a router, top num_experts_per_tok of num_experts (renormalized when
// norm_topk_prob), and a shared expert every token runs, scaled by a sigmoid gate. Dense layers are
// MLPs of intermediate_size.
#include "engine/common/status.h"
#include "engine/models/architecture.h"

namespace loom {

absl::StatusOr<ModelConfig> ParseQwen2MoeConfig(const Json& config) {
  DecoderDefaults defaults;
  defaults.max_position_embeddings = 32768;
  LOOM_ASSIGN_OR_RETURN(ModelConfig model, ParseDecoderConfig(config, defaults));
  LOOM_ASSIGN_OR_RETURN(model.qkv_bias, config.GetBool("qkv_bias", true));
  LOOM_RETURN_IF_ERROR(ParseQwenMoe(config, /*shared_expert=*/true,
                                    /*either_experts_name=*/false, model));
  return model;
}

}  // namespace loom
