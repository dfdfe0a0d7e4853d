#include "engine/weights/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "engine/common/json_writer.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

struct ArchitectureEntry {
  std::string_view gguf;
  std::string_view hf_class;
  std::string_view model_type;
  bool permuted_qk;  // llama.cpp's converter permuted the q/k rows for interleaved RoPE
};

constexpr ArchitectureEntry kArchitectures[] = {
    {"llama", "LlamaForCausalLM", "llama", true},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false},
    {"qwen2moe", "Qwen2MoeForCausalLM", "qwen2_moe", false},
    {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe", false},
};

absl::StatusOr<const ArchitectureEntry*> ArchitectureOf(const GgufFile& file) {
  const std::optional<std::string_view> name = file.GetString("general.architecture");
  if (!name) {
    return absl::InvalidArgumentError(
        StrCat(file.path(), ": no string general.architecture: not a model file"));
  }
  std::string supported;
  for (const ArchitectureEntry& arch : kArchitectures) {
    if (arch.gguf == *name) return &arch;
    supported = StrCat(supported, supported.empty() ? "" : ", ", arch.gguf);
  }
  return absl::UnimplementedError(StrCat(file.path(), ": GGUF architecture '", *name,
                                         "' is not supported (supported: ", supported, ")"));
}

// An integer hyper-parameter `<arch>.<key>` in [min, max].
absl::StatusOr<std::optional<int64_t>> ArchInt(const GgufFile& file, std::string_view arch,
                                               std::string_view key, int64_t min, int64_t max,
                                               bool required) {
  const std::string full = StrCat(arch, ".", key);
  const GgufValue* value = file.Find(full);
  if (value == nullptr) {
    if (required) return absl::InvalidArgumentError(StrCat(file.path(), ": no ", full));
    return std::optional<int64_t>();
  }
  const std::optional<int64_t> v = value->Int();
  if (!v || *v < min || *v > max) {
    return absl::InvalidArgumentError(
        StrCat(file.path(), ": ", full, " must be an integer in [", min, ", ", max, "]"));
  }
  return v;
}

absl::StatusOr<std::optional<double>> ArchFloat(const GgufFile& file, std::string_view arch,
                                                std::string_view key, double min, double max) {
  const std::string full = StrCat(arch, ".", key);
  if (file.Find(full) == nullptr) return std::optional<double>();
  const std::optional<double> v = file.GetFloat(full);
  if (!v || !(*v >= min && *v <= max)) {
    return absl::InvalidArgumentError(
        StrCat(file.path(), ": ", full, " must be a number in [", min, ", ", max, "]"));
  }
  return v;
}

// The mixture-of-experts hyper-parameters of `file`, as the config.json keys of its Hugging Face
// class (Mixtral for `llama` with experts; Qwen2-MoE / Qwen3-MoE), and what llama.cpp assumes
// where the converter writes nothing: Qwen2-MoE does not renormalize the chosen experts'
// probabilities, Qwen3-MoE and Mixtral do; an expert's size defaults to feed_forward_length /
// expert_used_count, the shared expert's to feed_forward_length. A sparse layer is one with a
// router (blk.N.ffn_gate_inp); others are dense (Qwen's mlp_only_layers).
struct GgufMoe {
  bool mixtral = false;
  int64_t num_experts = 0;  // 0: dense
  int64_t num_experts_per_tok = 0;
  int64_t expert_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE only
  bool norm_topk_prob = false;
  std::vector<int64_t> dense_layers;
};

absl::StatusOr<GgufMoe> ReadMoe(const GgufFile& file, const ArchitectureEntry& arch,
                                int64_t layers, int64_t ffn) {
  const std::string_view a = arch.gguf;
  const bool qwen2 = a == "qwen2moe";
  const bool qwen3 = a == "qwen3moe";
  GgufMoe moe;
  constexpr int64_t kMaxExperts = 1 << 16;
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> count,
                        ArchInt(file, a, "expert_count", 0, kMaxExperts, qwen2 || qwen3));
  if (!count || *count == 0) {
    if (qwen2 || qwen3) {
      return absl::InvalidArgumentError(
          StrCat(file.path(), ": ", a, ".expert_count must be positive"));
    }
    return moe;  // a dense llama file
  }
  if (a != "llama" && !qwen2 && !qwen3) {
    return absl::UnimplementedError(StrCat(file.path(), ": ", a, ".expert_count ", *count,
                                           ": mixture-of-experts '", a, "' is not supported"));
  }
  moe.mixtral = a == "llama";
  moe.num_experts = *count;
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> used,
                        ArchInt(file, a, "expert_used_count", 1, *count, true));
  moe.num_experts_per_tok = *used;
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> expert_ffn,
                        ArchInt(file, a, "expert_feed_forward_length", 1, int64_t{1} << 20, false));
  moe.expert_intermediate_size = expert_ffn ? *expert_ffn : moe.mixtral ? ffn : ffn / *used;
  if (qwen2) {
    LOOM_ASSIGN_OR_RETURN(
        std::optional<int64_t> shared,
        ArchInt(file, a, "expert_shared_feed_forward_length", 1, int64_t{1} << 20, false));
    moe.shared_expert_intermediate_size = shared ? *shared : ffn;
  }
  moe.norm_topk_prob = !qwen2;
  if (const GgufValue* norm = file.Find(StrCat(a, ".expert_weights_norm"))) {
    const std::optional<bool> v = norm->Bool();
    if (!v) {
      return absl::InvalidArgumentError(
          StrCat(file.path(), ": ", a, ".expert_weights_norm must be a bool"));
    }
    if (moe.mixtral && !*v) {
      return absl::UnimplementedError(StrCat(
          file.path(), ": ", a, ".expert_weights_norm false: Mixtral always renormalizes"));
    }
    moe.norm_topk_prob = *v;
  }
  // Routing loom does not implement: anything but a softmax over all experts, unscaled.
  constexpr int64_t kSoftmaxGating = 1;  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX
  if (const GgufValue* gating = file.Find(StrCat(a, ".expert_gating_func"))) {
    if (gating->Int() != std::optional<int64_t>(kSoftmaxGating)) {
      return absl::UnimplementedError(StrCat(file.path(), ": ", a,
                                             ".expert_gating_func is not softmax (1): only "
                                             "softmax routing is supported"));
    }
  }
  if (file.Find(StrCat(a, ".expert_weights_scale")) != nullptr) {
    const std::optional<double> scale = file.GetFloat(StrCat(a, ".expert_weights_scale"));
    if (scale != std::optional<double>(1.0)) {
      return absl::UnimplementedError(StrCat(file.path(), ": ", a,
                                             ".expert_weights_scale other than 1 is not supported"));
    }
  }
  if (const GgufValue* groups = file.Find(StrCat(a, ".expert_group_count"))) {
    if (groups->Int().value_or(0) > 1) {
      return absl::UnimplementedError(
          StrCat(file.path(), ": ", a, ".expert_group_count: grouped routing is not supported"));
    }
  }
  for (int64_t layer = 0; layer < layers; ++layer) {
    if (file.FindTensor(StrCat("blk.", layer, ".ffn_gate_inp.weight")) != nullptr) continue;
    if (moe.mixtral) {
      return absl::UnimplementedError(
          StrCat(file.path(), ": layer ", layer, " has no router (blk.", layer,
                 ".ffn_gate_inp.weight): a `llama` file with experts must have them in every "
                 "layer"));
    }
    moe.dense_layers.push_back(layer);
  }
  return moe;
}

void WriteMoe(const GgufMoe& moe, JsonWriter& w) {
  w.Key(moe.mixtral ? "num_local_experts" : "num_experts");
  w.Int(moe.num_experts);
  w.Key("num_experts_per_tok");
  w.Int(moe.num_experts_per_tok);
  if (moe.mixtral) return;  // intermediate_size is the experts' size
  w.Key("moe_intermediate_size");
  w.Int(moe.expert_intermediate_size);
  if (moe.shared_expert_intermediate_size > 0) {
    w.Key("shared_expert_intermediate_size");
    w.Int(moe.shared_expert_intermediate_size);
  }
  w.Key("norm_topk_prob");
  w.Bool(moe.norm_topk_prob);
  w.Key("decoder_sparse_step");
  w.Int(1);
  w.Key("mlp_only_layers");
  w.BeginArray();
  for (int64_t layer : moe.dense_layers) w.Int(layer);
  w.EndArray();
}

// Layer index and suffix of "blk.N.suffix"; nullopt for other names.
std::optional<std::pair<std::string, std::string_view>> SplitLayer(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view rest = name.substr(kPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  for (char c : rest.substr(0, dot)) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::make_pair(std::string(rest.substr(0, dot)), rest.substr(dot + 1));
}

struct NamePair {
  std::string_view gguf;
  std::string_view hf;
};

constexpr NamePair kLayerNames[] = {
    {"attn_norm", "input_layernorm"},    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},      {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj"},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj"},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"},
};

// Stacked experts [num_experts, rows, cols]: named like transformers' fused 3-D tensors, without
// a ".weight" suffix (engine/models/moe_weights.h, layout kStacked).
constexpr NamePair kStackedExpertNames[] = {
    {"ffn_gate_exps", "mlp.experts.gate_proj"},
    {"ffn_up_exps", "mlp.experts.up_proj"},
    {"ffn_down_exps", "mlp.experts.down_proj"},
};

constexpr NamePair kGlobalNames[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};

// "weight" / "bias" after the last dot, and the stem before it.
std::pair<std::string_view, std::string_view> SplitParam(std::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

// Copies `t`'s rows into Hugging Face order (see the header); `heads` row groups of head_dim.
std::unique_ptr<uint8_t[]> Unpermute(const TensorInfo& t, int64_t heads) {
  const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
  const int64_t row_bytes = rows == 0 ? 0 : t.num_bytes / rows;
  auto out = std::make_unique<uint8_t[]>(static_cast<size_t>(t.num_bytes));
  // An empty tensor (a zero dimension besides the rows) has nothing to reorder; walking its rows
  // would cost time in the row count, which a file can make 2^60.
  if (row_bytes == 0) return out;
  const int64_t d = rows / heads;
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < d / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t gguf_row = h * d + 2 * i + j;
        const int64_t hf_row = h * d + j * (d / 2) + i;
        std::memcpy(out.get() + hf_row * row_bytes, src + gguf_row * row_bytes,
                    static_cast<size_t>(row_bytes));
      }
    }
  }
  return out;
}

}  // namespace

std::string HfTensorName(std::string_view gguf_name) {
  const auto [stem, param] = SplitParam(gguf_name);
  if (param != "weight" && param != "bias") return std::string(gguf_name);
  if (std::optional<std::pair<std::string, std::string_view>> layer = SplitLayer(stem)) {
    for (const NamePair& pair : kStackedExpertNames) {
      if (pair.gguf == layer->second && param == "weight") {
        return StrCat("model.layers.", layer->first, ".", pair.hf);
      }
    }
    for (const NamePair& pair : kLayerNames) {
      if (pair.gguf == layer->second) {
        return StrCat("model.layers.", layer->first, ".", pair.hf, ".", param);
      }
    }
    return std::string(gguf_name);
  }
  for (const NamePair& pair : kGlobalNames) {
    if (pair.gguf == stem) return StrCat(pair.hf, ".", param);
  }
  return std::string(gguf_name);
}

absl::StatusOr<std::string> GgufConfigJson(const GgufFile& file) {
  LOOM_ASSIGN_OR_RETURN(const ArchitectureEntry* arch, ArchitectureOf(file));
  const std::string_view a = arch->gguf;
  constexpr int64_t kMaxSize = int64_t{1} << 20;
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> hidden,
                        ArchInt(file, a, "embedding_length", 1, kMaxSize, true));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> ffn,
                        ArchInt(file, a, "feed_forward_length", 1, kMaxSize, true));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> layers,
                        ArchInt(file, a, "block_count", 1, 4096, true));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> heads,
                        ArchInt(file, a, "attention.head_count", 1, 4096, true));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> kv_heads,
                        ArchInt(file, a, "attention.head_count_kv", 1, 4096, false));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> key_length,
                        ArchInt(file, a, "attention.key_length", 1, 4096, false));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> value_length,
                        ArchInt(file, a, "attention.value_length", 1, 4096, false));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> context,
                        ArchInt(file, a, "context_length", 1, int64_t{1} << 24, false));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> vocab,
                        ArchInt(file, a, "vocab_size", 1, int64_t{1} << 24, false));
  LOOM_ASSIGN_OR_RETURN(std::optional<double> eps,
                        ArchFloat(file, a, "attention.layer_norm_rms_epsilon", 0.0, 1.0));
  LOOM_ASSIGN_OR_RETURN(std::optional<double> theta,
                        ArchFloat(file, a, "rope.freq_base", 1e-3, 1e12));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> rope_dims,
                        ArchInt(file, a, "rope.dimension_count", 1, 4096, false));
  if (key_length && value_length && *key_length != *value_length) {
    return absl::UnimplementedError(StrCat(file.path(), ": key_length ", *key_length,
                                           " differs from value_length ", *value_length));
  }
  const int64_t head_dim = key_length ? *key_length : *hidden / *heads;
  if (rope_dims && *rope_dims != head_dim) {
    return absl::UnimplementedError(StrCat(file.path(), ": partial rotary embedding (", *rope_dims,
                                           " of ", head_dim, " dims) is not supported"));
  }
  if (!vocab) {
    if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens")) {
      vocab = tokens->size();
    } else if (const GgufTensor* embd = file.FindTensor("token_embd.weight")) {
      if (embd->shape.size() == 2) vocab = embd->shape[0];
    }
  }
  if (!vocab || *vocab < 1) {
    return absl::InvalidArgumentError(StrCat(file.path(), ": cannot tell the vocabulary size"));
  }

  LOOM_ASSIGN_OR_RETURN(const GgufMoe moe, ReadMoe(file, *arch, *layers, *ffn));

  JsonWriter w;
  w.BeginObject();
  w.Key("architectures");
  w.BeginArray();
  w.String(moe.mixtral ? std::string_view("MixtralForCausalLM") : arch->hf_class);
  w.EndArray();
  w.Key("model_type");
  w.String(moe.mixtral ? std::string_view("mixtral") : arch->model_type);
  w.Key("hidden_size");
  w.Int(*hidden);
  w.Key("intermediate_size");
  w.Int(moe.mixtral ? moe.expert_intermediate_size : *ffn);
  if (moe.num_experts > 0) WriteMoe(moe, w);
  w.Key("num_hidden_layers");
  w.Int(*layers);
  w.Key("num_attention_heads");
  w.Int(*heads);
  w.Key("num_key_value_heads");
  w.Int(kv_heads ? *kv_heads : *heads);
  w.Key("head_dim");
  w.Int(head_dim);
  w.Key("vocab_size");
  w.Int(*vocab);
  if (context) {
    w.Key("max_position_embeddings");
    w.Int(*context);
  }
  if (eps) {
    w.Key("rms_norm_eps");
    w.Double(*eps);
  }
  if (theta) {
    w.Key("rope_theta");
    w.Double(*theta);
  }
  const std::optional<std::string_view> scaling = file.GetString(StrCat(a, ".rope.scaling.type"));
  if (scaling && *scaling != "none") {
    if (*scaling != "linear") {
      return absl::UnimplementedError(
          StrCat(file.path(), ": rope scaling '", *scaling, "' is not supported (linear is)"));
    }
    LOOM_ASSIGN_OR_RETURN(std::optional<double> factor,
                          ArchFloat(file, a, "rope.scaling.factor", 1e-6, 1e6));
    w.Key("rope_scaling");
    w.BeginObject();
    w.Key("rope_type");
    w.String("linear");
    w.Key("factor");
    w.Double(factor ? *factor : 1.0);
    w.EndObject();
  }
  w.Key("tie_word_embeddings");
  w.Bool(file.FindTensor("output.weight") == nullptr);
  const bool q_bias = file.FindTensor("blk.0.attn_q.bias") != nullptr;
  if (arch->gguf == std::string_view("llama") || arch->gguf == std::string_view("qwen3moe")) {
    w.Key("attention_bias");
    w.Bool(q_bias);
  } else if (arch->gguf == std::string_view("qwen2moe")) {
    w.Key("qkv_bias");
    w.Bool(q_bias);
  }
  if (std::optional<int64_t> bos = file.GetInt("tokenizer.ggml.bos_token_id")) {
    w.Key("bos_token_id");
    w.Int(*bos);
  }
  w.Key("eos_token_id");
  w.BeginArray();
  std::vector<int64_t> eos;
  for (std::string_view key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                               "tokenizer.ggml.eom_token_id"}) {
    const std::optional<int64_t> id = file.GetInt(key);
    if (id && *id >= 0 && *id < *vocab && std::find(eos.begin(), eos.end(), *id) == eos.end()) {
      eos.push_back(*id);
      w.Int(*id);
    }
  }
  w.EndArray();
  w.Key("torch_dtype");
  w.String("float32");
  w.EndObject();
  return std::move(w).Take();
}

absl::StatusOr<std::vector<float>> GgufRopeFactors(const GgufFile& file, int64_t head_dim) {
  const GgufTensor* t = file.FindTensor("rope_freqs.weight");
  if (t == nullptr) return std::vector<float>();
  if (t->dtype != DType::kF32 || t->shape != std::vector<int64_t>{head_dim / 2}) {
    return absl::InvalidArgumentError(StrCat(file.path(), ": rope_freqs.weight must be f32 [",
                                             head_dim / 2, "]"));
  }
  std::vector<float> factors(static_cast<size_t>(head_dim / 2));
  std::memcpy(factors.data(), t->data, factors.size() * sizeof(float));
  for (float f : factors) {
    if (!(f > 0.0f && f < 1e30f)) {
      return absl::InvalidArgumentError(
          StrCat(file.path(), ": rope_freqs.weight holds a factor that is not positive and finite"));
    }
  }
  return factors;
}

absl::StatusOr<std::unique_ptr<GgufTensorView>> MapGgufTensors(const GgufFile& file) {
  LOOM_ASSIGN_OR_RETURN(const ArchitectureEntry* arch, ArchitectureOf(file));
  std::optional<int64_t> heads = file.GetInt(StrCat(arch->gguf, ".attention.head_count"));
  std::optional<int64_t> kv_heads = file.GetInt(StrCat(arch->gguf, ".attention.head_count_kv"));
  if (!kv_heads) kv_heads = heads;
  auto view = std::make_unique<GgufTensorView>();
  view->tensors.reserve(file.tensors().size());
  for (const GgufTensor& g : file.tensors()) {
    TensorInfo t;
    t.name = HfTensorName(g.name);
    t.dtype = g.dtype;
    t.shape = g.shape;
    t.data = g.data;
    t.num_bytes = g.num_bytes;
    t.file = file.path();
    // llama.cpp reads the shared expert's gate as a vector [hidden]; some files store it so.
    if (t.shape.size() == 1 && t.name.ends_with(".mlp.shared_expert_gate.weight")) {
      t.shape = {1, t.shape[0]};
    }
    if (arch->permuted_qk) {
      const bool q = t.name.find(".self_attn.q_proj.") != std::string::npos;
      const bool k = t.name.find(".self_attn.k_proj.") != std::string::npos;
      if (q || k) {
        const std::optional<int64_t> n = q ? heads : kv_heads;
        const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
        // rows % (2 n) without forming 2 n, which a file's head count can overflow.
        if (!n || *n < 1 || rows % 2 != 0 || (rows / 2) % *n != 0) {
          return absl::InvalidArgumentError(StrCat(file.path(), ": tensor '", g.name, "' has ",
                                                   rows, " rows, not whole heads of even size"));
        }
        view->owned.push_back(Unpermute(t, *n));
        t.data = view->owned.back().get();
      }
    }
    view->tensors.push_back(std::move(t));
  }
  return view;
}

}  // namespace loom
