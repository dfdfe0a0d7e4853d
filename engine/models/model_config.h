// Hyper-parameters of a decoder-only transformer of the Llama family, parsed from a Hugging Face
// config.json by the architecture's own file (engine/models/<arch>.cc).
//
// One struct describes every supported dense architecture: the differences between Llama,
// Mistral, Qwen2 and Qwen3 are options here (biases, q/k norm, sliding window), so the layers in
// engine/layers read flags instead of switching on architecture names. Anything a config asks
// for that this struct cannot express is refused at load time by the parser.
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
  // `torch_dtype` / `dtype` of the config (informational; each tensor keeps its own dtype).
  DType dtype = DType::kBF16;
  TokenId bos_token_id{-1};
  std::vector<TokenId> eos_token_ids;

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
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

// Qwen2/Qwen3-style per-layer windows: when `use_sliding_window` is true, layers named
// "sliding_attention" in `layer_types` (or, without that list, layers >= max_window_layers) use
// a window of `sliding_window` keys; otherwise every layer attends fully.
absl::Status ParseQwenSlidingWindow(const Json& config, ModelConfig& model);

// Adds eos ids from generation_config.json (an int or a list) to `model`, without duplicates.
// Error messages start with "generation_config.json: ".
absl::Status MergeGenerationConfig(const Json& generation_config, ModelConfig& model);

}  // namespace loom
