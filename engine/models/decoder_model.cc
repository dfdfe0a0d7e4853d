#include "engine/models/decoder_model.h"

#include <algorithm>
#include <vector>

#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/experts/resident_experts.h"

namespace loom {

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Create(
    const ModelConfig& config, DecoderWeights weights, Backend& backend, int32_t max_num_tokens,
    int32_t max_logit_rows, std::unique_ptr<ExpertProvider> experts, bool grouped_experts) {
  if (config.is_moe() && !backend.ops().SupportsMoe()) {
    return absl::UnimplementedError(StrCat("the ", backend.name(),
                                           " backend does not run mixture-of-experts models (",
                                           config.architecture, ")"));
  }
  std::unique_ptr<DecoderModel> model(
      new DecoderModel(config, std::move(weights), backend, max_num_tokens, max_logit_rows));
  if (config.is_moe()) {
    const bool resident = experts == nullptr;
    model->experts_ = experts != nullptr
                          ? std::move(experts)
                          : std::make_unique<ResidentExpertProvider>(model->weights_.experts,
                                                                     config.moe.num_experts);
    if (resident && grouped_experts) model->CreateExpertTables();
    if (!resident && grouped_experts) LOOM_RETURN_IF_ERROR(model->UseProviderTables());
  }
  LOOM_RETURN_IF_ERROR(model->Allocate());
  return model;
}

int32_t DecoderModel::GroupedTokenLimit() {
  return std::min(backend_.ops().MaxGroupedExpertTokens(),
                  max_num_tokens_ / config_.moe.num_experts_per_tok);
}

absl::Status DecoderModel::UseProviderTables() {
  bool any = false;
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    if (!config_.IsSparseLayer(l)) continue;
    if (experts_->GroupedTable(l) == nullptr) return absl::OkStatus();  // all or none
    any = true;
  }
  const int32_t tokens = GroupedTokenLimit();
  if (!any || tokens <= 0) return absl::OkStatus();
  // The routing of a grouped step comes back to the host for the provider.
  const int64_t bytes = int64_t{config_.num_layers} * tokens * config_.moe.num_experts_per_tok *
                        static_cast<int64_t>(sizeof(int32_t));
  LOOM_ASSIGN_OR_RETURN(host_routes_, backend_.AllocateHost(bytes));
  grouped_expert_tokens_ = tokens;
  return absl::OkStatus();
}

void DecoderModel::CreateExpertTables() {
  Ops& ops = backend_.ops();
  const int32_t num_experts = config_.moe.num_experts;
  // The grouped rows (tokens x num_experts_per_tok) live in the buffers sized for
  // max_num_tokens rows.
  const int32_t tokens = GroupedTokenLimit();
  if (tokens <= 0) return;
  const std::span<const ExpertWeights> all(weights_.experts);
  std::vector<std::unique_ptr<ExpertTable>> tables(static_cast<size_t>(config_.num_layers));
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    if (!config_.IsSparseLayer(l)) continue;
    const size_t first = static_cast<size_t>(l) * static_cast<size_t>(num_experts);
    if (all.size() < first + static_cast<size_t>(num_experts)) return;
    absl::StatusOr<std::unique_ptr<ExpertTable>> table =
        ops.CreateExpertTable(all.subspan(first, static_cast<size_t>(num_experts)));
    if (!table.ok()) {
      LOOM_LOG(kInfo, "experts routed on the host: ", table.status().message());
      return;
    }
    tables[static_cast<size_t>(l)] = *std::move(table);
  }
  expert_tables_ = std::move(tables);
  grouped_expert_tokens_ = tokens;
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
  const MoeConfig& moe = c.moe;
  // The dense MLP, the experts and the shared expert share the gate/up scratch.
  const int64_t inter = std::max({int64_t{c.intermediate_size},
                                  int64_t{moe.expert_intermediate_size},
                                  int64_t{moe.shared_expert_intermediate_size}});
  const int64_t experts = moe.num_experts;
  const int64_t pairs = t * moe.num_experts_per_tok;
  // Every buffer starts on a 64-byte boundary; the int32 ones are counted in 4-byte floats.
  auto padded = [](int64_t floats) { return (floats + 15) / 16 * 16; };
  struct Slot {
    int64_t floats;
    float** at;
  };
  std::vector<Slot> slots = {
      {t * c.hidden_size, &residual_},     {t * c.hidden_size, &normed_},
      {t * c.hidden_size, &delta_},        {t * c.q_dim(), &scratch_.q},
      {t * c.kv_dim(), &scratch_.k},       {t * c.kv_dim(), &scratch_.v},
      {t * c.q_dim(), &scratch_.attn},     {t * inter, &scratch_.gate},
      {t * inter, &scratch_.up},           {r * c.hidden_size, &logits_in_},
      {r * c.vocab_size, &logits_}};
  float* routes = nullptr;
  float* expert_offsets = nullptr;
  float* grouped_tokens = nullptr;
  float* token_rows = nullptr;
  if (c.is_moe()) {
    MoeScratch& m = moe_scratch_;
    slots.insert(slots.end(),
                 {{int64_t{c.num_layers} * pairs, &routes},
                  {t * experts, &m.router_logits},
                  {pairs, &m.expert_weights},
                  {experts + 1, &expert_offsets},
                  {pairs, &grouped_tokens},
                  {pairs, &token_rows},
                  {pairs, &m.grouped_weights},
                  {t * c.hidden_size, &m.gathered},
                  {t * c.hidden_size, &m.expert_out},
                  {t, &m.shared_gate_logits}});
    if (experts_->host_rows().x != nullptr) slots.push_back({pairs * c.hidden_size, &m.host_rows});
  }
  int64_t total = 0;
  for (const Slot& slot : slots) total += padded(slot.floats);
  LOOM_ASSIGN_OR_RETURN(buffer_, backend_.Allocate(total * static_cast<int64_t>(sizeof(float))));
  float* next = buffer_.as<float>();
  for (const Slot& slot : slots) {
    *slot.at = next;
    next += padded(slot.floats);
  }
  static_assert(sizeof(int32_t) == sizeof(float));
  routes_ = reinterpret_cast<int32_t*>(routes);
  moe_scratch_.expert_offsets = reinterpret_cast<int32_t*>(expert_offsets);
  if (c.is_moe()) {
    host_expert_offsets_.assign(static_cast<size_t>(experts) + 1, 0);
    moe_scratch_.host_expert_offsets = host_expert_offsets_.data();
  }
  moe_scratch_.grouped_tokens = reinterpret_cast<int32_t*>(grouped_tokens);
  moe_scratch_.token_rows = reinterpret_cast<int32_t*>(token_rows);
  return absl::OkStatus();
}

absl::Status DecoderModel::Forward(const StepBatch& batch, KvPool& kv, int64_t graph_key) {
  LOOM_CHECK(batch.num_tokens > 0 && batch.num_tokens <= max_num_tokens_, "step of ",
             batch.num_tokens, " tokens, at most ", max_num_tokens_);
  num_tokens_ = batch.num_tokens;
  // An expert cache's grouped step: its tables point at this step's experts before anything
  // is queued (or replayed), and its routing goes back to the cache after.
  const bool cache_grouped = expert_tables_.empty() && grouped_expert_tokens_ > 0 &&
                             batch.num_tokens <= grouped_expert_tokens_;
  absl::Status status;
  if (cache_grouped) status = experts_->BeginGroupedStep();
  if (status.ok() && graph_key < 0) {
    status = EnqueueForward(batch, kv);
  } else if (status.ok()) {
    absl::Status forward;
    const absl::Status graph =
        backend_.RunGraph(graph_key, [&] { forward = EnqueueForward(batch, kv); });
    status = graph.ok() ? forward : graph;
  }
  if (cache_grouped && status.ok()) status = ReportGroupedRouting();
  if (experts_ != nullptr) experts_->EndStep();
  return status;
}

absl::Status DecoderModel::ReportGroupedRouting() {
  const int32_t top_k = config_.moe.num_experts_per_tok;
  const int64_t pairs = int64_t{num_tokens_} * top_k;
  auto* host = reinterpret_cast<int32_t*>(host_routes_.get());
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    if (!config_.IsSparseLayer(l)) continue;
    backend_.CopyToHostAsync(host + l * pairs, RoutedExperts(l),
                             pairs * static_cast<int64_t>(sizeof(int32_t)));
  }
  LOOM_RETURN_IF_ERROR(backend_.WaitForHostCopies());
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    if (!config_.IsSparseLayer(l)) continue;
    experts_->GroupedRouting(l, std::span<const int32_t>(host + l * pairs,
                                                         static_cast<size_t>(pairs)));
  }
  return absl::OkStatus();
}

const int32_t* DecoderModel::RoutedExperts(int32_t layer) const {
  if (!config_.IsSparseLayer(layer)) return nullptr;
  return routes_ + int64_t{layer} * max_num_tokens_ * config_.moe.num_experts_per_tok;
}

absl::Status DecoderModel::EnqueueForward(const StepBatch& batch, KvPool& kv) {
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
    if (c.IsSparseLayer(l)) {
      int32_t* routes = routes_ + int64_t{l} * max_num_tokens_ * c.moe.num_experts_per_tok;
      const ExpertTable* table = nullptr;
      if (tokens <= grouped_expert_tokens_) {
        table = expert_tables_.empty() ? experts_->GroupedTable(l)
                                       : expert_tables_[static_cast<size_t>(l)].get();
      }
      LOOM_RETURN_IF_ERROR(MoeBlock(backend_, ops, c, w.moe, l, *experts_, table, tokens,
                                    normed_, scratch_, moe_scratch_, routes, delta_));
    } else {
      MlpBlock(ops, c, w, tokens, normed_, scratch_, delta_);
    }
  }
  ops.Add(residual_, delta_, int64_t{tokens} * c.hidden_size);
  return absl::OkStatus();
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
