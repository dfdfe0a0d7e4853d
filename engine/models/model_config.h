// Hyper-parameters of a decoder-only transformer of the Llama family, parsed from a Hugging Face
// config.json by the architecture's own file (engine/models/<arch>.cc).
//
// One struct describes every supported architecture: the differences between Llama, Mistral,
// Qwen2, Qwen3 and their mixture-of-experts relatives Mixtral, Qwen2-MoE and Qwen3-MoE are
// options here (biases, q/k norm, sliding window, the feed-forward variant of each layer), so the
// layers in engine/layers read flags instead of switching on architecture names. Anything a
// config asks for that this struct cannot express is refused at load time by the parser.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/ids.h"
#include "engine/common/json.h"
#include "kernels/common/dtype.h"

namespace loom {

// Rotary position embedding: base frequency and the scaling of the inverse frequencies.
struct RopeConfig {
  enum class Scaling { kNone, kLinear, kLlama3 };
  double theta = 10000.0;
  Scaling scaling = Scaling::kNone;
  double factor = 1.0;  // kLinear and kLlama3
  // kLlama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  // Per-frequency divisors applied after the scaling above (inv_freq[i] /= freq_factors[i]): how
  // GGUF files carry Llama 3.1 scaling (the `rope_freqs` tensor). Empty: none.
  std::vector<float> freq_factors;
};

// How a mixture-of-experts checkpoint names its per-expert tensors (Hugging Face hub layout):
//   kQwen:    model.layers.{i}.mlp.gate.weight (router),
//             model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight
//   kMixtral: model.layers.{i}.block_sparse_moe.gate.weight,
//             model.layers.{i}.block_sparse_moe.experts.{e}.{w1,w3,w2}.weight (gate, up, down)
// Both also load from the fused layout transformers 5 can save (engine/models/moe_weights.h).
enum class ExpertNaming { kQwen, kMixtral };

// The sparse feed-forward block (shared/ARCHITECTURE.md §4 "FFN variants"):
//   p = softmax(router(x)) in f32; the top `num_experts_per_tok` experts by p, their p divided
//   by their sum when `norm_topk_prob`; y = sum_k p_k * expert_k(x) (+ sigmoid(shared_gate(x)) *
//   shared_expert(x)), each expert a gate/up/down SiLU MLP of `expert_intermediate_size`.
struct MoeConfig {
  int32_t num_experts = 0;  // 0: not a mixture-of-experts model
  int32_t num_experts_per_tok = 0;
  int32_t expert_intermediate_size = 0;
  // Renormalize the chosen experts' probabilities (Mixtral always; Qwen per config).
  bool norm_topk_prob = false;
  // A shared expert every token runs, with this intermediate size (0: none), scaled by a
  // sigmoid gate `shared_expert_gate` [1, hidden] (Qwen2-MoE).
  int32_t shared_expert_intermediate_size = 0;
  ExpertNaming naming = ExpertNaming::kQwen;
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  // Biases: q/k/v projections, the output projection, the three MLP projections.
  bool qkv_bias = false;
  bool o_proj_bias = false;
  bool mlp_bias = false;
  // Qwen3: RMSNorm over head_dim applied to each q and k head before RoPE.
  bool qk_norm = false;
  // Per layer: 0 for full causal attention, w > 0 for a sliding window of w keys.
  std::vector<int32_t> layer_sliding_window;
  // Mixture of experts (moe.num_experts > 0): which layers' feed-forward is the sparse block;
  // the others are dense MLPs of intermediate_size. Empty for dense models.
  MoeConfig moe;
  std::vector<bool> layer_sparse;
  // `torch_dtype` / `dtype` of the config (informational; each tensor keeps its own dtype).
  DType dtype = DType::kBF16;
  TokenId bos_token_id{-1};
  std::vector<TokenId> eos_token_ids;

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
  bool is_moe() const { return moe.num_experts > 0; }
  bool IsSparseLayer(int32_t layer) const {
    return is_moe() && static_cast<size_t>(layer) < layer_sparse.size() && layer_sparse[layer];
  }
};

// Keys every Llama-family config shares, with the defaults each architecture gives them when a
// config leaves them out.
struct DecoderDefaults {
  int32_t max_position_embeddings = 2048;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  // head_dim when the config omits it; 0 means hidden_size / num_attention_heads.
  int32_t head_dim = 0;
};

// Parses the shared keys (sizes, heads, head_dim, eps, rope_theta / rope_scaling /
// rope_parameters, max_position_embeddings, tie_word_embeddings, dtype, bos/eos, hidden_act)
// and checks their consistency. Architecture-specific keys are the caller's.
absl::StatusOr<ModelConfig> ParseDecoderConfig(const Json& config, const DecoderDefaults& defaults);

// Mistral-style windows: `sliding_window` (null: none; absent: `default_window`, 0 for none)
// applies to every layer; a window at least max_position_embeddings long is no window.
absl::Status ParseSlidingWindowAllLayers(const Json& config, int64_t default_window,
                                         ModelConfig& model);

// Qwen2/Qwen3-style per-layer windows: when `use_sliding_window` is true, layers named
// "sliding_attention" in `layer_types` (or, without that list, layers >= max_window_layers) use
// a window of `sliding_window` keys; otherwise every layer attends fully.
absl::Status ParseQwenSlidingWindow(const Json& config, ModelConfig& model);

// Mixtral's sparse block: num_local_experts (or its alias num_experts), num_experts_per_tok,
// intermediate_size (each expert's), always renormalized, every layer sparse, Mixtral tensor
// names. router_jitter_noise only acts in training and is ignored.
absl::Status ParseMixtralMoe(const Json& config, ModelConfig& model);

// Qwen2-MoE / Qwen3-MoE: num_experts, num_experts_per_tok, moe_intermediate_size,
// norm_topk_prob, and which layers are sparse: layer i unless it is in mlp_only_layers, when
// num_experts > 0 and (i + 1) % decoder_sparse_step == 0 (num_experts 0: a dense model). With
// `shared_expert`, also shared_expert_intermediate_size (Qwen2-MoE). With
// `either_experts_name`, the count may be under num_local_experts, which transformers 5 writes
// for Qwen3-MoE. use_sliding_window true is refused.
absl::Status ParseQwenMoe(const Json& config, bool shared_expert, bool either_experts_name,
                          ModelConfig& model);

// Adds eos ids from generation_config.json (an int or a list) to `model`, without duplicates.
// Error messages start with "generation_config.json: ".
absl::Status MergeGenerationConfig(const Json& generation_config, ModelConfig& model);

}  // namespace loom
