// The two blocks of a Llama-family decoder layer, written only in terms of backend Ops:
//
//   attention: q, k, v = normed . W_{q,k,v}^T (+ bias); [q/k RMSNorm per head]; RoPE(q, k);
//              K/V into the paged cache; out = softmax(q k^T * scale) v; delta = out . W_o^T
//   mlp:       delta = (silu(normed . W_gate^T) * (normed . W_up^T)) . W_down^T
//
// The residual adds and the norms between blocks belong to the model (DecoderModel), which
// fuses each add with the following norm.
#pragma once

#include "engine/backend/ops.h"
#include "engine/layers/step_batch.h"
#include "engine/models/decoder_weights.h"
#include "engine/models/model_config.h"

namespace loom {

// Scratch activations of one step, each sized for the step's token budget.
struct LayerScratch {
  float* q = nullptr;      // [tokens, q_dim]
  float* k = nullptr;      // [tokens, kv_dim]
  float* v = nullptr;      // [tokens, kv_dim]
  float* attn = nullptr;   // [tokens, q_dim]
  float* gate = nullptr;   // [tokens, intermediate]
  float* up = nullptr;     // [tokens, intermediate]
};

// normed: [tokens, hidden] -> delta: [tokens, hidden]. `cache` is this layer's KV cache.
void AttentionBlock(Ops& ops, const ModelConfig& config, const DecoderLayerWeights& weights,
                    int32_t layer, const StepBatch& batch, const PagedKvView& cache,
                    const float* normed, const LayerScratch& scratch, float* delta);

// normed: [tokens, hidden] -> delta: [tokens, hidden].
void MlpBlock(Ops& ops, const ModelConfig& config, const DecoderLayerWeights& weights,
              int32_t num_tokens, const float* normed, const LayerScratch& scratch, float* delta);

}  // namespace loom
