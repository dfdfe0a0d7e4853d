#include "engine/models/decoder_model.h"

#include <vector>

#include "engine/common/logging.h"
#include "engine/common/status.h"

namespace loom {

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Create(const ModelConfig& config,
                                                                   DecoderWeights weights,
                                                                   Backend& backend,
                                                                   int32_t max_num_tokens,
                                                                   int32_t max_logit_rows) {
  std::unique_ptr<DecoderModel> model(
      new DecoderModel(config, std::move(weights), backend, max_num_tokens, max_logit_rows));
  LOOM_RETURN_IF_ERROR(model->Allocate());
  return model;
}

DecoderModel::DecoderModel(const ModelConfig& config, DecoderWeights weights, Backend& backend,
                           int32_t max_num_tokens, int32_t max_logit_rows)
    : config_(config),
      weights_(std::move(weights)),
      backend_(backend),
      max_num_tokens_(max_num_tokens),
      max_logit_rows_(max_logit_rows) {}

absl::Status DecoderModel::Allocate() {
  const int64_t t = max_num_tokens_;
  const int64_t r = max_logit_rows_;
  const ModelConfig& c = config_;
  // Every buffer starts on a 64-byte boundary.
  auto padded = [](int64_t floats) { return (floats + 15) / 16 * 16; };
  const std::vector<int64_t> sizes = {
      padded(t * c.hidden_size),       padded(t * c.hidden_size),       padded(t * c.hidden_size),
      padded(t * c.q_dim()),           padded(t * c.kv_dim()),          padded(t * c.kv_dim()),
      padded(t * c.q_dim()),           padded(t * c.intermediate_size), padded(t * c.intermediate_size),
      padded(r * c.hidden_size),       padded(r * c.vocab_size)};
  int64_t total = 0;
  for (int64_t size : sizes) total += size;
  LOOM_ASSIGN_OR_RETURN(buffer_, backend_.Allocate(total * static_cast<int64_t>(sizeof(float))));
  float* next = buffer_.as<float>();
  float** slots[] = {&residual_,     &normed_,   &delta_,         &scratch_.q,
                     &scratch_.k,    &scratch_.v, &scratch_.attn, &scratch_.gate,
                     &scratch_.up,   &logits_in_, &logits_};
  for (size_t i = 0; i < sizes.size(); ++i) {
    *slots[i] = next;
    next += sizes[i];
  }
  return absl::OkStatus();
}

absl::Status DecoderModel::Forward(const StepBatch& batch, KvPool& kv, int64_t graph_key) {
  LOOM_CHECK(batch.num_tokens > 0 && batch.num_tokens <= max_num_tokens_, "step of ",
             batch.num_tokens, " tokens, at most ", max_num_tokens_);
  num_tokens_ = batch.num_tokens;
  if (graph_key < 0) {
    EnqueueForward(batch, kv);
    return absl::OkStatus();
  }
  return backend_.RunGraph(graph_key, [&] { EnqueueForward(batch, kv); });
}

void DecoderModel::EnqueueForward(const StepBatch& batch, KvPool& kv) {
  Ops& ops = backend_.ops();
  const ModelConfig& c = config_;
  const int32_t tokens = batch.num_tokens;
  ops.Embedding(batch.token_ids, tokens, weights_.embed_tokens, residual_);
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const DecoderLayerWeights& w = weights_.layers[l];
    if (l == 0) {
      ops.RmsNorm(residual_, c.hidden_size, tokens, c.hidden_size, w.input_norm, c.rms_norm_eps,
                  normed_, c.hidden_size);
    } else {
      ops.AddRmsNorm(residual_, delta_, tokens, c.hidden_size, w.input_norm, c.rms_norm_eps,
                     normed_);
    }
    AttentionBlock(ops, c, w, l, batch, kv.Layer(l), normed_, scratch_, delta_);
    ops.AddRmsNorm(residual_, delta_, tokens, c.hidden_size, w.post_attention_norm,
                   c.rms_norm_eps, normed_);
    MlpBlock(ops, c, w, tokens, normed_, scratch_, delta_);
  }
  ops.Add(residual_, delta_, int64_t{tokens} * c.hidden_size);
}

const float* DecoderModel::Logits(std::span<const int32_t> rows) {
  LOOM_CHECK(rows.size() <= static_cast<size_t>(max_logit_rows_), rows.size(), " logit rows");
  Ops& ops = backend_.ops();
  const int32_t hidden = config_.hidden_size;
  // Consecutive rows are normalised in one call; prompt log-probabilities ask for long runs.
  size_t i = 0;
  while (i < rows.size()) {
    size_t run = 1;
    while (i + run < rows.size() && rows[i + run] == rows[i] + static_cast<int32_t>(run)) ++run;
    LOOM_CHECK(rows[i] >= 0 && rows[i] + static_cast<int32_t>(run) <= num_tokens_, "logit row");
    ops.RmsNorm(residual_ + int64_t{rows[i]} * hidden, hidden, static_cast<int32_t>(run), hidden,
                weights_.final_norm, config_.rms_norm_eps, logits_in_ + int64_t(i) * hidden,
                hidden);
    i += run;
  }
  const LinearOutput head[] = {{&weights_.lm_head, logits_, config_.vocab_size}};
  ops.Linear(logits_in_, hidden, static_cast<int32_t>(rows.size()), head);
  return logits_;
}

}  // namespace loom
