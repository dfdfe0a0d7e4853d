// MixtralForCausalLM: the Mistral layout (an optional sliding window on every layer, none when
// the config leaves `sliding_window` out) with a sparse mixture-of-experts feed-forward block in
// every layer: a router over num_local_experts experts, the top num_experts_per_tok of them per
// token, their probabilities always renormalized.
// Checkpoints name the experts block_sparse_moe.experts.{e}.w1/w3/w2 (gate, up, down).
#include "engine/common/status.h"
#include "engine/models/architecture.h"

namespace loom {

absl::StatusOr<ModelConfig> ParseMixtralConfig(const Json& config) {
  DecoderDefaults defaults;
  defaults.max_position_embeddings = 4096 * 32;
  LOOM_ASSIGN_OR_RETURN(ModelConfig model, ParseDecoderConfig(config, defaults));
  // Unlike Mistral's configuration class, Mixtral's defaults to no window.
  LOOM_RETURN_IF_ERROR(ParseSlidingWindowAllLayers(config, /*default_window=*/0, model));
  LOOM_RETURN_IF_ERROR(ParseMixtralMoe(config, model));
  return model;
}

}  // namespace loom
