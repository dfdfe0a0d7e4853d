#include "engine/models/decoder_weights.h"

#include <map>

#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

std::string LayerName(int32_t layer, std::string_view suffix) {
  return StrCat("model.layers.", layer, ".", suffix);
}

struct Shapes {
  int64_t hidden, q_dim, kv_dim, intermediate, head_dim, vocab;
};

Shapes ShapesOf(const ModelConfig& c) {
  return {c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.head_dim, c.vocab_size};
}

void ExpectLinear(std::vector<ExpectedTensor>& out, const std::string& prefix, int64_t rows,
                  int64_t cols, bool bias) {
  out.push_back({prefix + ".weight", {rows, cols}, true, /*quantized_ok=*/true});
  if (bias) out.push_back({prefix + ".bias", {rows}, true});
}

WeightView View(const TensorInfo& t) {
  WeightView view;
  view.data = t.data;
  view.dtype = t.dtype;
  view.rows = t.shape.size() == 2 ? t.shape[0] : 1;
  view.cols = t.shape.empty() ? 1 : t.shape.back();
  return view;
}

class Binder {
 public:
  Binder(const Checkpoint& checkpoint, DecoderWeights& weights)
      : checkpoint_(checkpoint), weights_(weights) {}

  // Validation has run, so every required tensor exists with the expected shape.
  WeightView Tensor(const std::string& name) { return View(*checkpoint_.Find(name)); }

  LinearWeight Linear(const std::string& prefix, bool bias) {
    LinearWeight linear;
    linear.weight = Tensor(prefix + ".weight");
    if (bias) {
      const TensorInfo& t = *checkpoint_.Find(prefix + ".bias");
      auto copy = std::make_unique<float[]>(t.NumElements());
      for (int64_t i = 0; i < t.NumElements(); ++i) copy[i] = LoadAsF32(t.data, t.dtype, i);
      linear.bias = copy.get();
      weights_.bias_storage.push_back(std::move(copy));
    }
    return linear;
  }

 private:
  const Checkpoint& checkpoint_;
  DecoderWeights& weights_;
};

}  // namespace

std::vector<ExpectedTensor> ExpectedDecoderTensors(const ModelConfig& c, ExpertLayout layout) {
  const Shapes s = ShapesOf(c);
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {s.vocab, s.hidden}, true, /*quantized_ok=*/true});
  for (int32_t i = 0; i < c.num_layers; ++i) {
    out.push_back({LayerName(i, "input_layernorm.weight"), {s.hidden}, true});
    ExpectLinear(out, LayerName(i, "self_attn.q_proj"), s.q_dim, s.hidden, c.qkv_bias);
    ExpectLinear(out, LayerName(i, "self_attn.k_proj"), s.kv_dim, s.hidden, c.qkv_bias);
    ExpectLinear(out, LayerName(i, "self_attn.v_proj"), s.kv_dim, s.hidden, c.qkv_bias);
    ExpectLinear(out, LayerName(i, "self_attn.o_proj"), s.hidden, s.q_dim, c.o_proj_bias);
    if (c.qk_norm) {
      out.push_back({LayerName(i, "self_attn.q_norm.weight"), {s.head_dim}, true});
      out.push_back({LayerName(i, "self_attn.k_norm.weight"), {s.head_dim}, true});
    }
    out.push_back({LayerName(i, "post_attention_layernorm.weight"), {s.hidden}, true});
    if (c.IsSparseLayer(i)) {
      ExpectMoeLayerTensors(c, i, layout, out);
      continue;
    }
    ExpectLinear(out, LayerName(i, "mlp.gate_proj"), s.intermediate, s.hidden, c.mlp_bias);
    ExpectLinear(out, LayerName(i, "mlp.up_proj"), s.intermediate, s.hidden, c.mlp_bias);
    ExpectLinear(out, LayerName(i, "mlp.down_proj"), s.hidden, s.intermediate, c.mlp_bias);
  }
  out.push_back({"model.norm.weight", {s.hidden}, true});
  // A tied checkpoint may still carry a copy of lm_head; it is checked but not used.
  out.push_back({"lm_head.weight", {s.vocab, s.hidden}, !c.tie_word_embeddings,
                 /*quantized_ok=*/true});
  return out;
}

absl::StatusOr<DecoderWeights> BindDecoderWeights(const ModelConfig& c,
                                                  const Checkpoint& checkpoint,
                                                  std::vector<std::string>* unexpected) {
  const ExpertLayout layout = DetectExpertLayout(c, checkpoint);
  const std::vector<ExpectedTensor> expected = ExpectedDecoderTensors(c, layout);
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> extra, ValidateCheckpoint(checkpoint, expected));
  if (unexpected != nullptr) *unexpected = std::move(extra);

  DecoderWeights w;
  Binder bind(checkpoint, w);
  w.embed_tokens = bind.Tensor("model.embed_tokens.weight");
  w.layers.resize(c.num_layers);
  if (c.is_moe()) w.experts.resize(size_t(c.num_layers) * c.moe.num_experts);
  for (int32_t i = 0; i < c.num_layers; ++i) {
    DecoderLayerWeights& l = w.layers[i];
    l.input_norm = bind.Tensor(LayerName(i, "input_layernorm.weight"));
    l.q_proj = bind.Linear(LayerName(i, "self_attn.q_proj"), c.qkv_bias);
    l.k_proj = bind.Linear(LayerName(i, "self_attn.k_proj"), c.qkv_bias);
    l.v_proj = bind.Linear(LayerName(i, "self_attn.v_proj"), c.qkv_bias);
    l.o_proj = bind.Linear(LayerName(i, "self_attn.o_proj"), c.o_proj_bias);
    if (c.qk_norm) {
      l.q_norm = bind.Tensor(LayerName(i, "self_attn.q_norm.weight"));
      l.k_norm = bind.Tensor(LayerName(i, "self_attn.k_norm.weight"));
    }
    l.post_attention_norm = bind.Tensor(LayerName(i, "post_attention_layernorm.weight"));
    if (c.IsSparseLayer(i)) {
      const size_t first = size_t(i) * c.moe.num_experts;
      BindMoeLayer(c, i, layout, checkpoint, l.moe,
                   std::span(w.experts).subspan(first, c.moe.num_experts));
      continue;
    }
    l.gate_proj = bind.Linear(LayerName(i, "mlp.gate_proj"), c.mlp_bias);
    l.up_proj = bind.Linear(LayerName(i, "mlp.up_proj"), c.mlp_bias);
    l.down_proj = bind.Linear(LayerName(i, "mlp.down_proj"), c.mlp_bias);
  }
  w.final_norm = bind.Tensor("model.norm.weight");
  w.lm_head.weight = c.tie_word_embeddings ? w.embed_tokens : bind.Tensor("lm_head.weight");
  return w;
}

}  // namespace loom

namespace loom {
namespace {

// Every pointer of the weights that refers to host memory, with its size in bytes.
struct HostTensor {
  const void** data;
  int64_t bytes;
};

void CollectView(WeightView& view, std::vector<HostTensor>& out) {
  if (view.data == nullptr) return;
  out.push_back({&view.data, view.rows * DTypeRowBytes(view.dtype, view.cols)});
}

void CollectLinear(LinearWeight& linear, std::vector<HostTensor>& out) {
  CollectView(linear.weight, out);
  if (linear.bias != nullptr) {
    out.push_back({reinterpret_cast<const void**>(&linear.bias),
                   linear.weight.rows * static_cast<int64_t>(sizeof(float))});
  }
}

}  // namespace

absl::Status CheckWeightFormats(const DecoderWeights& weights, const Ops& ops,
                                std::string_view backend_name) {
  auto check = [&](const WeightView& view, std::string_view what) -> absl::Status {
    if (view.data == nullptr || ops.SupportsWeightFormat(view.dtype)) return absl::OkStatus();
    return absl::UnimplementedError(StrCat("the ", backend_name, " backend has no kernel for ",
                                           what, " weights stored as ", DTypeName(view.dtype)));
  };
  LOOM_RETURN_IF_ERROR(check(weights.embed_tokens, "embedding"));
  LOOM_RETURN_IF_ERROR(check(weights.lm_head.weight, "LM head"));
  for (const DecoderLayerWeights& l : weights.layers) {
    for (const LinearWeight* linear :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
          &l.moe.router, &l.moe.shared_gate_proj, &l.moe.shared_up_proj, &l.moe.shared_down_proj,
          &l.moe.shared_expert_gate}) {
      LOOM_RETURN_IF_ERROR(check(linear->weight, "linear"));
    }
  }
  for (const ExpertWeights& e : weights.experts) {
    for (const LinearWeight* linear : {&e.gate, &e.up, &e.down}) {
      LOOM_RETURN_IF_ERROR(check(linear->weight, "expert"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MoveDecoderWeightsTo(Backend& backend, DecoderWeights& weights,
                                             bool keep_routed_experts) {
  if (backend.host_memory()) return 0;
  std::vector<HostTensor> tensors;
  CollectView(weights.embed_tokens, tensors);
  for (DecoderLayerWeights& layer : weights.layers) {
    CollectView(layer.input_norm, tensors);
    MoeLayerWeights& moe = layer.moe;
    for (LinearWeight* linear :
         {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj, &layer.gate_proj,
          &layer.up_proj, &layer.down_proj, &moe.router, &moe.shared_gate_proj,
          &moe.shared_up_proj, &moe.shared_down_proj, &moe.shared_expert_gate}) {
      CollectLinear(*linear, tensors);
    }
    CollectView(layer.q_norm, tensors);
    CollectView(layer.k_norm, tensors);
    CollectView(layer.post_attention_norm, tensors);
  }
  for (ExpertWeights& expert : weights.experts) {
    if (keep_routed_experts) break;
    for (LinearWeight* linear : {&expert.gate, &expert.up, &expert.down}) {
      CollectLinear(*linear, tensors);
    }
  }
  CollectView(weights.final_norm, tensors);
  CollectLinear(weights.lm_head, tensors);

  // One device copy per distinct host address, each at a 256-byte boundary.
  std::map<const void*, int64_t> offsets;
  int64_t total = 0;
  for (const HostTensor& t : tensors) {
    if (offsets.emplace(*t.data, total).second) total += (t.bytes + 255) / 256 * 256;
  }
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer storage, backend.Allocate(total));
  char* base = storage.as<char>();
  std::map<const void*, bool> copied;
  for (const HostTensor& t : tensors) {
    const int64_t offset = offsets.at(*t.data);
    if (copied.emplace(*t.data, true).second) backend.CopyToDevice(base + offset, *t.data, t.bytes);
  }
  for (const HostTensor& t : tensors) *t.data = base + offsets.at(*t.data);
  LOOM_RETURN_IF_ERROR(backend.Synchronize());
  weights.device_storage = std::move(storage);
  return total;
}

}  // namespace loom
