#include "engine/models/moe_weights.h"

#include <string>

#include "engine/common/strings.h"

namespace loom {
namespace {

std::string LayerName(int32_t layer, std::string_view suffix) {
  return StrCat("model.layers.", layer, ".", suffix);
}

// Where a layer's router and per-expert tensors live, and the per-expert projection names (gate,
// up, down).
struct Names {
  std::string block;  // "mlp" or "block_sparse_moe"
  std::string_view gate, up, down;
};

Names NamesOf(const ModelConfig& c, ExpertLayout layout) {
  if (c.moe.naming == ExpertNaming::kMixtral && layout == ExpertLayout::kPerExpert) {
    return {"block_sparse_moe", "w1", "w3", "w2"};
  }
  return {"mlp", "gate_proj", "up_proj", "down_proj"};
}

std::string ExpertName(int32_t layer, const Names& n, int32_t expert, std::string_view proj) {
  return LayerName(layer, StrCat(n.block, ".experts.", expert, ".", proj, ".weight"));
}

// Rows [first_row, first_row + num_rows) of a row-major tensor whose last dim is `cols`.
LinearWeight Rows(const TensorInfo& t, int64_t first_row, int64_t num_rows) {
  LinearWeight linear;
  const int64_t cols = t.shape.back();
  linear.weight.data = static_cast<const char*>(t.data) + first_row * DTypeRowBytes(t.dtype, cols);
  linear.weight.dtype = t.dtype;
  linear.weight.rows = num_rows;
  linear.weight.cols = cols;
  return linear;
}

// A 2-D tensor, whole. Validation has run, so it exists with its expected shape.
LinearWeight Matrix(const Checkpoint& checkpoint, const std::string& name) {
  const TensorInfo& t = *checkpoint.Find(name);
  return Rows(t, 0, t.shape[0]);
}

}  // namespace

ExpertLayout DetectExpertLayout(const ModelConfig& c, const Checkpoint& checkpoint) {
  for (int32_t layer = 0; layer < c.num_layers; ++layer) {
    if (!c.IsSparseLayer(layer)) continue;
    if (checkpoint.Find(LayerName(layer, "mlp.experts.gate_up_proj")) != nullptr) {
      return ExpertLayout::kFused;
    }
    if (checkpoint.Find(LayerName(layer, "mlp.experts.gate_proj")) != nullptr) {
      return ExpertLayout::kStacked;
    }
    return ExpertLayout::kPerExpert;
  }
  return ExpertLayout::kPerExpert;
}

void ExpectMoeLayerTensors(const ModelConfig& c, int32_t layer, ExpertLayout layout,
                           std::vector<ExpectedTensor>& out) {
  const int64_t hidden = c.hidden_size;
  const int64_t inter = c.moe.expert_intermediate_size;
  const int64_t experts = c.moe.num_experts;
  const Names n = NamesOf(c, layout);
  out.push_back({LayerName(layer, n.block + ".gate.weight"), {experts, hidden}, true, true});
  if (layout == ExpertLayout::kFused) {
    out.push_back(
        {LayerName(layer, "mlp.experts.gate_up_proj"), {experts, 2 * inter, hidden}, true, true});
    out.push_back(
        {LayerName(layer, "mlp.experts.down_proj"), {experts, hidden, inter}, true, true});
  } else if (layout == ExpertLayout::kStacked) {
    out.push_back(
        {LayerName(layer, "mlp.experts.gate_proj"), {experts, inter, hidden}, true, true});
    out.push_back({LayerName(layer, "mlp.experts.up_proj"), {experts, inter, hidden}, true, true});
    out.push_back(
        {LayerName(layer, "mlp.experts.down_proj"), {experts, hidden, inter}, true, true});
  } else {
    for (int32_t e = 0; e < experts; ++e) {
      out.push_back({ExpertName(layer, n, e, n.gate), {inter, hidden}, true, true});
      out.push_back({ExpertName(layer, n, e, n.up), {inter, hidden}, true, true});
      out.push_back({ExpertName(layer, n, e, n.down), {hidden, inter}, true, true});
    }
  }
  const int64_t shared = c.moe.shared_expert_intermediate_size;
  if (shared > 0) {
    out.push_back(
        {LayerName(layer, "mlp.shared_expert.gate_proj.weight"), {shared, hidden}, true, true});
    out.push_back(
        {LayerName(layer, "mlp.shared_expert.up_proj.weight"), {shared, hidden}, true, true});
    out.push_back(
        {LayerName(layer, "mlp.shared_expert.down_proj.weight"), {hidden, shared}, true, true});
    out.push_back({LayerName(layer, "mlp.shared_expert_gate.weight"), {1, hidden}, true, true});
  }
}

void BindMoeLayer(const ModelConfig& c, int32_t layer, ExpertLayout layout,
                  const Checkpoint& checkpoint, MoeLayerWeights& weights,
                  std::span<ExpertWeights> experts) {
  const Names n = NamesOf(c, layout);
  weights.router = Matrix(checkpoint, LayerName(layer, n.block + ".gate.weight"));
  const int64_t inter = c.moe.expert_intermediate_size;
  const int64_t hidden = c.hidden_size;
  if (layout == ExpertLayout::kFused) {
    const TensorInfo& gate_up = *checkpoint.Find(LayerName(layer, "mlp.experts.gate_up_proj"));
    const TensorInfo& down = *checkpoint.Find(LayerName(layer, "mlp.experts.down_proj"));
    for (int64_t e = 0; e < static_cast<int64_t>(experts.size()); ++e) {
      experts[e].gate = Rows(gate_up, e * 2 * inter, inter);
      experts[e].up = Rows(gate_up, e * 2 * inter + inter, inter);
      experts[e].down = Rows(down, e * hidden, hidden);
    }
  } else if (layout == ExpertLayout::kStacked) {
    const TensorInfo& gate = *checkpoint.Find(LayerName(layer, "mlp.experts.gate_proj"));
    const TensorInfo& up = *checkpoint.Find(LayerName(layer, "mlp.experts.up_proj"));
    const TensorInfo& down = *checkpoint.Find(LayerName(layer, "mlp.experts.down_proj"));
    for (int64_t e = 0; e < static_cast<int64_t>(experts.size()); ++e) {
      experts[e].gate = Rows(gate, e * inter, inter);
      experts[e].up = Rows(up, e * inter, inter);
      experts[e].down = Rows(down, e * hidden, hidden);
    }
  } else {
    for (int32_t e = 0; e < static_cast<int32_t>(experts.size()); ++e) {
      experts[e].gate = Matrix(checkpoint, ExpertName(layer, n, e, n.gate));
      experts[e].up = Matrix(checkpoint, ExpertName(layer, n, e, n.up));
      experts[e].down = Matrix(checkpoint, ExpertName(layer, n, e, n.down));
    }
  }
  if (c.moe.shared_expert_intermediate_size > 0) {
    weights.shared_gate_proj =
        Matrix(checkpoint, LayerName(layer, "mlp.shared_expert.gate_proj.weight"));
    weights.shared_up_proj =
        Matrix(checkpoint, LayerName(layer, "mlp.shared_expert.up_proj.weight"));
    weights.shared_down_proj =
        Matrix(checkpoint, LayerName(layer, "mlp.shared_expert.down_proj.weight"));
    weights.shared_expert_gate =
        Matrix(checkpoint, LayerName(layer, "mlp.shared_expert_gate.weight"));
  }
}

}  // namespace loom
