// The tensors of a sparse (mixture-of-experts) decoder layer, as Hugging Face checkpoints store
// them, and their binding: the router and the shared expert as LinearWeights of the layer, each
// expert as one ExpertWeights unit (what the ExpertProvider hands out).
//
// Two layouts, the whole checkpoint in one of them (engine/models/model_config.h ExpertNaming gives
// the per-expert names):
//   kPerExpert  one 2-D tensor per expert and projection, as published checkpoints come and as
//               transformers' save_pretrained writes them by default;
//   kFused      transformers 5's in-memory layout (save_pretrained(save_original_format=False)):
//               model.layers.{i}.mlp.gate.weight [E, hidden],
//               model.layers.{i}.mlp.experts.gate_up_proj [E, 2 * I, hidden] (rows: gate, then
//               up), model.layers.{i}.mlp.experts.down_proj [E, hidden, I]; each expert is then
//               a view of rows of the 3-D tensors;
//   kStacked    llama.cpp's layout, as a GGUF file's tensors appear (engine/weights/gguf_model.h):
//               model.layers.{i}.mlp.gate.weight [E, hidden],
//               model.layers.{i}.mlp.experts.{gate,up}_proj [E, I, hidden],
//               model.layers.{i}.mlp.experts.down_proj [E, hidden, I]; each expert is whole rows
//               of the 3-D tensors, in any storage format (a block-quantized row is whole blocks).
// Both: Qwen2-MoE's shared expert is model.layers.{i}.mlp.shared_expert.{gate,up,down}_proj.weight
// and model.layers.{i}.mlp.shared_expert_gate.weight [1, hidden]. No MoE tensor has a bias.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/experts/expert_provider.h"
#include "engine/models/model_config.h"
#include "engine/weights/checkpoint.h"
#include "engine/weights/weight_spec.h"

namespace loom {

enum class ExpertLayout { kPerExpert, kFused, kStacked };

// The always-resident weights of a sparse layer (the experts are reached through the provider).
struct MoeLayerWeights {
  LinearWeight router;  // [num_experts, hidden]
  // Shared expert (MoeConfig::shared_expert_intermediate_size > 0) and its gate [1, hidden].
  LinearWeight shared_gate_proj, shared_up_proj, shared_down_proj;
  LinearWeight shared_expert_gate;
};

// kFused / kStacked when the checkpoint holds the fused / stacked gate tensor of the model's first
// sparse layer, otherwise kPerExpert (validation then names whatever is missing).
ExpertLayout DetectExpertLayout(const ModelConfig& config, const Checkpoint& checkpoint);

// Appends the tensors sparse layer `layer` reads, with exact shapes.
void ExpectMoeLayerTensors(const ModelConfig& config, int32_t layer, ExpertLayout layout,
                           std::vector<ExpectedTensor>& out);

// Binds sparse layer `layer` after ValidateCheckpoint accepted ExpectMoeLayerTensors: the router
// and shared expert into `weights`, expert e into experts[e] (num_experts entries).
void BindMoeLayer(const ModelConfig& config, int32_t layer, ExpertLayout layout,
                  const Checkpoint& checkpoint, MoeLayerWeights& weights,
                  std::span<ExpertWeights> experts);

}  // namespace loom
