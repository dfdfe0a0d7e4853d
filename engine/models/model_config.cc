#include "engine/models/model_config.h"

#include <algorithm>
#include <cmath>

#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "kernels/common/moe_args.h"

namespace loom {
namespace {

constexpr int32_t kMaxLayers = 1 << 16;

absl::Status Invalid(std::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

absl::Status Unsupported(std::string_view message) {
  return absl::UnimplementedError(std::string(message));
}

absl::StatusOr<int32_t> PositiveInt(const Json& config, std::string_view key,
                                    std::optional<int64_t> fallback = {}) {
  LOOM_ASSIGN_OR_RETURN(const int64_t value, config.GetInt(key, fallback));
  if (value <= 0 || value > (int64_t{1} << 30)) {
    return Invalid(StrCat(key, " must be a positive integer, got ", value));
  }
  return static_cast<int32_t>(value);
}

// Token ids in config files are an int, a list of ints, or null.
absl::Status AppendTokenIds(const Json& config, std::string_view key, std::vector<TokenId>& out) {
  std::optional<Json> node = config.Find(key);
  if (!node || node->IsNull()) return absl::OkStatus();
  std::vector<Json> items;
  if (node->IsArray()) {
    for (size_t i = 0; i < node->size(); ++i) items.push_back((*node)[i]);
  } else {
    items.push_back(*node);
  }
  for (const Json& item : items) {
    LOOM_ASSIGN_OR_RETURN(const int64_t id, item.AsInt());
    if (id < 0 || id > INT32_MAX) return Invalid(StrCat(key, " has an invalid token id ", id));
    const TokenId token(static_cast<int32_t>(id));
    if (std::find(out.begin(), out.end(), token) == out.end()) out.push_back(token);
  }
  return absl::OkStatus();
}

absl::StatusOr<DType> ParseDType(const Json& config) {
  std::optional<Json> node = config.Find("torch_dtype");
  if (!node || node->IsNull()) node = config.Find("dtype");
  if (!node || node->IsNull()) return DType::kBF16;
  LOOM_ASSIGN_OR_RETURN(std::string name, node->AsString());
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16") return DType::kF16;
  if (name == "float32") return DType::kF32;
  return Unsupported(StrCat("dtype '", name, "' (supported: bfloat16, float16, float32)"));
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5): the same dictionary.
absl::Status ParseRopeScaling(const Json& scaling, RopeConfig& rope) {
  std::string type = "default";
  if (scaling.Has("rope_type")) {
    LOOM_ASSIGN_OR_RETURN(type, scaling.GetString("rope_type"));
  } else if (scaling.Has("type")) {
    LOOM_ASSIGN_OR_RETURN(type, scaling.GetString("type"));
  }
  if (scaling.Has("rope_theta")) {
    LOOM_ASSIGN_OR_RETURN(rope.theta, scaling.GetDouble("rope_theta"));
  }
  LOOM_ASSIGN_OR_RETURN(const double partial, scaling.GetDouble("partial_rotary_factor", 1.0));
  if (partial != 1.0) return Unsupported("partial_rotary_factor other than 1 is not supported");
  if (type == "default") return absl::OkStatus();
  if (type != "linear" && type != "llama3") {
    return Unsupported(StrCat("rope scaling type '", type,
                              "' is not supported (supported: default, linear, llama3)"));
  }
  LOOM_ASSIGN_OR_RETURN(rope.factor, scaling.GetDouble("factor"));
  if (!(rope.factor >= 1.0) || !std::isfinite(rope.factor)) {
    return Invalid(StrCat("rope scaling factor must be >= 1, got ", rope.factor));
  }
  if (type == "linear") {
    rope.scaling = RopeConfig::Scaling::kLinear;
    return absl::OkStatus();
  }
  rope.scaling = RopeConfig::Scaling::kLlama3;
  LOOM_ASSIGN_OR_RETURN(rope.low_freq_factor, scaling.GetDouble("low_freq_factor"));
  LOOM_ASSIGN_OR_RETURN(rope.high_freq_factor, scaling.GetDouble("high_freq_factor"));
  LOOM_ASSIGN_OR_RETURN(rope.original_max_position_embeddings,
                        scaling.GetInt("original_max_position_embeddings"));
  if (!(rope.high_freq_factor > rope.low_freq_factor) || rope.low_freq_factor <= 0 ||
      rope.original_max_position_embeddings <= 0) {
    return Invalid("llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor and a "
                   "positive original_max_position_embeddings");
  }
  return absl::OkStatus();
}

absl::Status ParseRope(const Json& config, double default_theta, RopeConfig& rope) {
  LOOM_ASSIGN_OR_RETURN(rope.theta, config.GetDouble("rope_theta", default_theta));
  // transformers 4 keeps partial_rotary_factor at the top level, transformers 5 in the dict.
  LOOM_ASSIGN_OR_RETURN(const double partial, config.GetDouble("partial_rotary_factor", 1.0));
  if (partial != 1.0) return Unsupported("partial_rotary_factor other than 1 is not supported");
  std::optional<Json> scaling = config.Find("rope_parameters");
  if (!scaling || scaling->IsNull()) scaling = config.Find("rope_scaling");
  if (scaling && !scaling->IsNull()) {
    if (!scaling->IsObject()) return Invalid(StrCat(scaling->path(), " must be an object"));
    if (!scaling->Has("rope_type") && !scaling->Has("type") && !scaling->Has("rope_theta")) {
      return Unsupported("per-layer-type rope parameters are not supported");
    }
    LOOM_RETURN_IF_ERROR(ParseRopeScaling(*scaling, rope));
  }
  if (!(rope.theta > 0) || !std::isfinite(rope.theta)) {
    return Invalid(StrCat("rope_theta must be positive, got ", rope.theta));
  }
  return absl::OkStatus();
}

absl::Status ParseSizes(const Json& config, int32_t default_head_dim, ModelConfig& m) {
  LOOM_ASSIGN_OR_RETURN(m.vocab_size, PositiveInt(config, "vocab_size"));
  LOOM_ASSIGN_OR_RETURN(m.hidden_size, PositiveInt(config, "hidden_size"));
  LOOM_ASSIGN_OR_RETURN(m.intermediate_size, PositiveInt(config, "intermediate_size"));
  LOOM_ASSIGN_OR_RETURN(m.num_layers, PositiveInt(config, "num_hidden_layers"));
  // Per-layer state is allocated from this count before the checkpoint is looked at.
  if (m.num_layers > kMaxLayers) {
    return Invalid(
        StrCat("num_hidden_layers must be at most ", kMaxLayers, ", got ", m.num_layers));
  }
  LOOM_ASSIGN_OR_RETURN(m.num_heads, PositiveInt(config, "num_attention_heads"));
  LOOM_ASSIGN_OR_RETURN(m.num_kv_heads, PositiveInt(config, "num_key_value_heads", m.num_heads));
  if (m.num_heads % m.num_kv_heads != 0) {
    return Invalid(StrCat("num_attention_heads (", m.num_heads,
                          ") must be a multiple of num_key_value_heads (", m.num_kv_heads, ")"));
  }
  const bool head_dim_given = config.Has("head_dim") && !config.Find("head_dim")->IsNull();
  if (!head_dim_given && default_head_dim == 0) {
    if (m.hidden_size % m.num_heads != 0) {
      return Invalid(StrCat("hidden_size (", m.hidden_size,
                            ") is not a multiple of num_attention_heads and head_dim is not given"));
    }
    default_head_dim = m.hidden_size / m.num_heads;
  }
  LOOM_ASSIGN_OR_RETURN(m.head_dim, PositiveInt(config, "head_dim", default_head_dim));
  if (m.head_dim % 2 != 0 || m.head_dim > 512) {
    return Unsupported(StrCat("head_dim ", m.head_dim, " (must be even and at most 512)"));
  }
  // q_dim() and kv_dim() are int32 products.
  if (int64_t{m.num_heads} * m.head_dim > (int64_t{1} << 30)) {
    return Invalid(StrCat("num_attention_heads (", m.num_heads, ") times head_dim (", m.head_dim,
                          ") is too large"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseDecoderConfig(const Json& config,
                                               const DecoderDefaults& defaults) {
  if (!config.IsObject()) return Invalid("the top level must be an object");
  ModelConfig m;
  std::optional<Json> architectures = config.Find("architectures");
  if (architectures && architectures->IsArray() && architectures->size() > 0) {
    LOOM_ASSIGN_OR_RETURN(m.architecture, (*architectures)[0].AsString());
  }
  LOOM_RETURN_IF_ERROR(ParseSizes(config, defaults.head_dim, m));
  LOOM_ASSIGN_OR_RETURN(m.max_position_embeddings,
                        PositiveInt(config, "max_position_embeddings",
                                    defaults.max_position_embeddings));
  LOOM_ASSIGN_OR_RETURN(const double eps, config.GetDouble("rms_norm_eps", defaults.rms_norm_eps));
  if (!(eps > 0 && eps < 1)) return Invalid(StrCat("rms_norm_eps must be in (0, 1), got ", eps));
  m.rms_norm_eps = static_cast<float>(eps);
  LOOM_RETURN_IF_ERROR(ParseRope(config, defaults.rope_theta, m.rope));
  LOOM_ASSIGN_OR_RETURN(m.tie_word_embeddings,
                        config.GetBool("tie_word_embeddings", defaults.tie_word_embeddings));
  LOOM_ASSIGN_OR_RETURN(const std::string act, config.GetString("hidden_act", "silu"));
  if (act != "silu") return Unsupported(StrCat("hidden_act '", act, "' (supported: silu)"));
  LOOM_ASSIGN_OR_RETURN(m.dtype, ParseDType(config));
  std::vector<TokenId> bos;
  LOOM_RETURN_IF_ERROR(AppendTokenIds(config, "bos_token_id", bos));
  if (!bos.empty()) m.bos_token_id = bos.front();
  LOOM_RETURN_IF_ERROR(AppendTokenIds(config, "eos_token_id", m.eos_token_ids));
  m.layer_sliding_window.assign(m.num_layers, 0);
  return m;
}

absl::Status ParseSlidingWindowAllLayers(const Json& config, int64_t default_window,
                                         ModelConfig& model) {
  int64_t window = default_window;
  if (std::optional<Json> node = config.Find("sliding_window")) {
    if (node->IsNull()) {
      window = 0;
    } else {
      LOOM_ASSIGN_OR_RETURN(window, node->AsInt());
      if (window <= 0) {
        return Invalid(StrCat("sliding_window must be positive or null, got ", window));
      }
    }
  }
  // A window at least as long as the context never cuts anything off.
  if (window >= model.max_position_embeddings) window = 0;
  model.layer_sliding_window.assign(model.num_layers, static_cast<int32_t>(window));
  return absl::OkStatus();
}

absl::Status ParseQwenSlidingWindow(const Json& config, ModelConfig& model) {
  LOOM_ASSIGN_OR_RETURN(const bool enabled, config.GetBool("use_sliding_window", false));
  if (!enabled) return absl::OkStatus();
  // Absent means the configuration class's default; null means no window (transformers then
  // makes every layer a full-attention one).
  std::optional<Json> node = config.Find("sliding_window");
  if (node && node->IsNull()) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(const int64_t window, config.GetInt("sliding_window", 4096));
  if (window <= 0) return Invalid(StrCat("sliding_window must be positive, got ", window));
  const int32_t effective = window >= model.max_position_embeddings ? 0 : static_cast<int32_t>(window);
  std::optional<Json> types = config.Find("layer_types");
  if (types && !types->IsNull()) {
    if (!types->IsArray() || types->size() != static_cast<size_t>(model.num_layers)) {
      return Invalid("layer_types must be a list with one entry per layer");
    }
    for (int32_t i = 0; i < model.num_layers; ++i) {
      LOOM_ASSIGN_OR_RETURN(const std::string type, (*types)[i].AsString());
      if (type != "full_attention" && type != "sliding_attention") {
        return Unsupported(StrCat("layer type '", type, "'"));
      }
      model.layer_sliding_window[i] = type == "sliding_attention" ? effective : 0;
    }
    return absl::OkStatus();
  }
  LOOM_ASSIGN_OR_RETURN(const int64_t first, config.GetInt("max_window_layers", 28));
  for (int32_t i = 0; i < model.num_layers; ++i) {
    model.layer_sliding_window[i] = i >= first ? effective : 0;
  }
  return absl::OkStatus();
}

namespace {

// The key that holds the expert count: `key`, or, for configuration classes that map one name to
// the other (Mixtral, Qwen3-MoE), whichever of num_experts / num_local_experts the file has.
absl::StatusOr<std::string_view> ExpertsKey(const Json& config, std::string_view key,
                                            bool either_name) {
  if (!either_name) return key;
  const bool local = config.Has("num_local_experts");
  const bool plain = config.Has("num_experts");
  if (local && plain) {
    LOOM_ASSIGN_OR_RETURN(const int64_t a, config.GetInt("num_local_experts"));
    LOOM_ASSIGN_OR_RETURN(const int64_t b, config.GetInt("num_experts"));
    if (a != b) {
      return Invalid(StrCat("num_local_experts (", a, ") and num_experts (", b, ") disagree"));
    }
  }
  if (local) return std::string_view("num_local_experts");
  if (plain) return std::string_view("num_experts");
  return key;  // missing: the error names the usual key
}

// The expert counts and sizes every sparse block has; `experts_key` names the expert count.
absl::Status ParseExpertCounts(const Json& config, std::string_view experts_key,
                               std::string_view intermediate_key, MoeConfig& moe) {
  LOOM_ASSIGN_OR_RETURN(moe.num_experts, PositiveInt(config, experts_key));
  if (moe.num_experts > kMaxMoeExperts) {
    return Unsupported(StrCat(experts_key, " ", moe.num_experts, " (at most ", kMaxMoeExperts,
                              " experts are supported)"));
  }
  LOOM_ASSIGN_OR_RETURN(moe.num_experts_per_tok, PositiveInt(config, "num_experts_per_tok"));
  if (moe.num_experts_per_tok > moe.num_experts) {
    return Invalid(StrCat("num_experts_per_tok (", moe.num_experts_per_tok,
                          ") must be at most ", experts_key, " (", moe.num_experts, ")"));
  }
  LOOM_ASSIGN_OR_RETURN(moe.expert_intermediate_size, PositiveInt(config, intermediate_key));
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseMixtralMoe(const Json& config, ModelConfig& model) {
  MoeConfig& moe = model.moe;
  LOOM_ASSIGN_OR_RETURN(const std::string_view experts_key,
                        ExpertsKey(config, "num_local_experts", /*either_name=*/true));
  LOOM_RETURN_IF_ERROR(ParseExpertCounts(config, experts_key, "intermediate_size", moe));
  moe.norm_topk_prob = true;
  moe.naming = ExpertNaming::kMixtral;
  model.layer_sparse.assign(model.num_layers, true);
  return absl::OkStatus();
}

absl::Status ParseQwenMoe(const Json& config, bool shared_expert, bool either_experts_name,
                          ModelConfig& model) {
  LOOM_ASSIGN_OR_RETURN(const bool sliding, config.GetBool("use_sliding_window", false));
  if (sliding) {
    return Unsupported(StrCat("use_sliding_window true is not supported for ",
                              model.architecture.empty() ? "this model" : model.architecture));
  }
  LOOM_ASSIGN_OR_RETURN(const std::string_view experts_key,
                        ExpertsKey(config, "num_experts", either_experts_name));
  LOOM_ASSIGN_OR_RETURN(const int64_t num_experts, config.GetInt(experts_key));
  if (num_experts < 0) return Invalid(StrCat(experts_key, " must be >= 0, got ", num_experts));
  if (num_experts == 0) return absl::OkStatus();  // every layer is a dense MLP
  MoeConfig& moe = model.moe;
  LOOM_RETURN_IF_ERROR(ParseExpertCounts(config, experts_key, "moe_intermediate_size", moe));
  LOOM_ASSIGN_OR_RETURN(moe.norm_topk_prob, config.GetBool("norm_topk_prob", false));
  if (shared_expert) {
    LOOM_ASSIGN_OR_RETURN(moe.shared_expert_intermediate_size,
                          PositiveInt(config, "shared_expert_intermediate_size"));
  }
  moe.naming = ExpertNaming::kQwen;
  LOOM_ASSIGN_OR_RETURN(const int64_t step, config.GetInt("decoder_sparse_step", 1));
  if (step <= 0 || step > kMaxLayers) {
    return Invalid(StrCat("decoder_sparse_step must be a positive integer, got ", step));
  }
  model.layer_sparse.assign(model.num_layers, false);
  for (int32_t i = 0; i < model.num_layers; ++i) model.layer_sparse[i] = (i + 1) % step == 0;
  std::optional<Json> dense = config.Find("mlp_only_layers");
  if (dense && !dense->IsNull()) {
    if (!dense->IsArray()) return Invalid("mlp_only_layers must be a list of layer indices");
    for (size_t i = 0; i < dense->size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(const int64_t layer, (*dense)[i].AsInt());
      if (layer < 0 || layer >= model.num_layers) {
        return Invalid(StrCat("mlp_only_layers has layer ", layer, ", outside [0, ",
                              model.num_layers, ")"));
      }
      model.layer_sparse[layer] = false;
    }
  }
  return absl::OkStatus();
}

absl::Status MergeGenerationConfig(const Json& generation_config, ModelConfig& model) {
  absl::Status status = generation_config.IsObject()
                            ? AppendTokenIds(generation_config, "eos_token_id", model.eos_token_ids)
                            : Invalid("the top level must be an object");
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat("generation_config.json: ", status.message()));
}

}  // namespace loom
