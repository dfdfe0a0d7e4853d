// The weights of a Llama-family decoder, bound by Hugging Face tensor name to a checkpoint.
//
// Names (per layer i): model.embed_tokens.weight, model.layers.{i}.input_layernorm.weight,
// model.layers.{i}.self_attn.{q,k,v,o}_proj.{weight,bias}, model.layers.{i}.self_attn.
// {q,k}_norm.weight (Qwen3), model.layers.{i}.post_attention_layernorm.weight,
// model.layers.{i}.mlp.{gate,up,down}_proj.{weight,bias}, model.norm.weight, lm_head.weight
// (absent when tie_word_embeddings, which reuses the embedding). Sparse layers of a
// mixture-of-experts model have a router, experts and an optional shared expert instead of the
// mlp projections (engine/models/moe_weights.h, in either of its two layouts).
//
// Matrices are used in place from the checkpoint's mapping in their stored dtype; biases (small)
// are converted to f32 copies owned here. The Checkpoint must outlive the DecoderWeights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/ops.h"
#include "engine/experts/expert_provider.h"
#include "engine/models/model_config.h"
#include "engine/models/moe_weights.h"
#include "engine/weights/checkpoint.h"
#include "engine/weights/weight_spec.h"

namespace loom {

struct DecoderLayerWeights {
  WeightView input_norm;
  LinearWeight q_proj, k_proj, v_proj, o_proj;
  WeightView q_norm, k_norm;  // qk_norm only
  WeightView post_attention_norm;
  LinearWeight gate_proj, up_proj, down_proj;  // dense layers
  MoeLayerWeights moe;                          // sparse layers
};

struct DecoderWeights {
  WeightView embed_tokens;  // [vocab, hidden]
  std::vector<DecoderLayerWeights> layers;
  WeightView final_norm;
  LinearWeight lm_head;  // the embedding when tied
  // Mixture-of-experts models: expert e of layer l at [l * num_experts + e]; the entries of
  // dense layers are empty. The forward pass reaches them only through an ExpertProvider.
  std::vector<ExpertWeights> experts;
  // f32 copies of the bias tensors that LinearWeight::bias points into.
  std::vector<std::unique_ptr<float[]>> bias_storage;
  // Set by MoveDecoderWeightsTo: the backend memory every pointer above then points into.
  DeviceBuffer device_storage;
};

// What an architecture expects to find in its checkpoint, with exact shapes (the experts of a
// mixture-of-experts model in `layout`).
std::vector<ExpectedTensor> ExpectedDecoderTensors(
    const ModelConfig& config, ExpertLayout layout = ExpertLayout::kPerExpert);

// Validates `checkpoint` against ExpectedDecoderTensors (experts in the layout the checkpoint
// has, DetectExpertLayout) and binds every tensor. Tensors the
// checkpoint has beyond them are appended to `unexpected` (the caller warns).
absl::StatusOr<DecoderWeights> BindDecoderWeights(const ModelConfig& config,
                                                  const Checkpoint& checkpoint,
                                                  std::vector<std::string>* unexpected);

// OK when `ops` runs every matrix of `weights` in its format; otherwise Unimplemented naming the
// first tensor whose format has no kernel on that backend.
absl::Status CheckWeightFormats(const DecoderWeights& weights, const Ops& ops,
                                std::string_view backend_name);

// For a backend with device memory: copies every tensor `weights` points at (each once: a tied
// LM head shares the embedding) into one allocation of `backend` and repoints the views there,
// after which the checkpoint may be closed. Returns the bytes copied. A backend whose memory is
// host memory keeps the checkpoint's mapping (nothing is copied; returns 0). With
// `keep_routed_experts`, `weights.experts` stay as they are (an expert cache copies them).
absl::StatusOr<int64_t> MoveDecoderWeightsTo(Backend& backend, DecoderWeights& weights,
                                             bool keep_routed_experts = false);

}  // namespace loom
