// A Llama-family decoder on one backend: embedding, the layers, the final norm and the LM head,
// over a ragged StepBatch and the paged KV pool.
//
//   residual = embed(tokens)
//   per layer: normed = norm(residual (+= previous delta)); delta = attention(normed)
//              normed = norm(residual += delta);             delta = ffn(normed)
//   hidden = residual + delta;  logits(row) = lm_head(final_norm(hidden[row]))
//
// The feed-forward block of each layer is a variant: the dense MlpBlock, or for the sparse layers
// of a mixture-of-experts model the MoeBlock, whose experts come from an ExpertProvider (the
// all-resident one over the bound weights). Each sparse layer's routing (the experts chosen for
// each token row) is kept until the next Forward, for the step's routing counts.
//
// Activation buffers are allocated once, for the largest step (max_num_tokens) and the largest
// number of logit rows produced at once (max_logit_rows). Thread safety: one caller (the engine
// loop).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/experts/expert_provider.h"
#include "engine/kv/kv_pool.h"
#include "engine/layers/decoder_layer.h"
#include "engine/layers/moe_block.h"
#include "engine/layers/step_batch.h"
#include "engine/models/decoder_weights.h"
#include "engine/models/model_config.h"

namespace loom {

class DecoderModel {
 public:
  // `experts` reaches a mixture-of-experts model's routed experts; null keeps them all resident
  // (ResidentExpertProvider over `weights`), and then `grouped_experts` lets small steps run
  // them grouped (grouped_expert_tokens).
  static absl::StatusOr<std::unique_ptr<DecoderModel>> Create(
      const ModelConfig& config, DecoderWeights weights, Backend& backend, int32_t max_num_tokens,
      int32_t max_logit_rows, std::unique_ptr<ExpertProvider> experts = nullptr,
      bool grouped_experts = true);

  const ModelConfig& config() const { return config_; }
  int32_t max_num_tokens() const { return max_num_tokens_; }
  int32_t max_logit_rows() const { return max_logit_rows_; }

  // Queues the embedding and every layer for the batch (writing its K/V into `kv`), leaving the
  // final hidden state of every token for Logits. batch.num_tokens <= max_num_tokens. With
  // graph_key >= 0 the work goes through Backend::RunGraph under that key: the caller promises
  // that every batch it passes with one key has the same shape and device pointers. Returns
  // the capture or launch error of a graph, or the expert provider's error; the ops' own
  // errors come from the backend's Synchronize.
  absl::Status Forward(const StepBatch& batch, KvPool& kv, int64_t graph_key = -1);

  // The experts sparse layer `layer` chose for each token row of the last Forward, in the
  // backend's memory: [num_tokens, num_experts_per_tok], most probable first. Null for a dense
  // layer or a dense model.
  const int32_t* RoutedExperts(int32_t layer) const;

  // Steps of at most this many tokens run every sparse layer's experts grouped, from a table
  // (Ops::MoeGroupedExperts): they wait for nothing on the host, so a backend with graphs may
  // capture them. The tables are the model's own with every expert resident, or the expert
  // cache's (ExpertProvider::GroupedTable). 0 for a dense model, a cache without tables, or a
  // backend without grouped experts.
  int32_t grouped_expert_tokens() const { return grouped_expert_tokens_; }

  // Logits of the given hidden rows of the last Forward, in the backend's memory:
  // [rows.size(), vocab]. rows.size() <= max_logit_rows. Valid until the next call.
  const float* Logits(std::span<const int32_t> rows);

 private:
  DecoderModel(const ModelConfig& config, DecoderWeights weights, Backend& backend,
               int32_t max_num_tokens, int32_t max_logit_rows);
  absl::Status Allocate();
  // Builds the sparse layers' expert tables when every expert is resident and the backend runs
  // grouped experts; leaves grouped_expert_tokens_ 0 (logged) where it cannot.
  void CreateExpertTables();
  // With an expert provider of its own (a cache) that keeps grouped tables: sets
  // grouped_expert_tokens_ and the host buffer of the routing the provider is told about.
  absl::Status UseProviderTables();
  int32_t GroupedTokenLimit();
  // After a grouped step behind a cache: its routing, copied to the host, to the provider.
  absl::Status ReportGroupedRouting();
  absl::Status EnqueueForward(const StepBatch& batch, KvPool& kv);

  ModelConfig config_;
  DecoderWeights weights_;
  Backend& backend_;
  int32_t max_num_tokens_;
  int32_t max_logit_rows_;
  DeviceBuffer buffer_;
  float* residual_ = nullptr;
  float* normed_ = nullptr;
  float* delta_ = nullptr;
  LayerScratch scratch_;
  // Mixture-of-experts models only.
  std::unique_ptr<ExpertProvider> experts_;
  MoeScratch moe_scratch_;
  std::vector<int32_t> host_expert_offsets_;  // moe_scratch_.host_expert_offsets
  int32_t* routes_ = nullptr;  // [num_layers, max_num_tokens, num_experts_per_tok]
  std::vector<std::unique_ptr<ExpertTable>> expert_tables_;  // per layer; null for dense ones
  int32_t grouped_expert_tokens_ = 0;
  HostMemory host_routes_;  // [num_layers, grouped tokens, top_k] (UseProviderTables)
  float* logits_in_ = nullptr;  // [max_logit_rows, hidden]
  float* logits_ = nullptr;     // [max_logit_rows, vocab]
  int32_t num_tokens_ = 0;      // of the last Forward
};

}  // namespace loom
