#include "scheduler/experts/expert_cache_driver.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

absl::Status CheckConfig(const ExpertCacheDriverConfig& config) {
  if (config.trace_capacity < 1 || config.max_prefetch_per_step < 0 ||
      config.prefetch_lookahead_layers < 1 || config.rematch_interval_steps < 1 ||
      config.max_rematches_per_step < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert cache driver config out of range: trace_capacity ", config.trace_capacity,
        " (>= 1), max_prefetch_per_step ", config.max_prefetch_per_step,
        " (>= 0), prefetch_lookahead_layers ", config.prefetch_lookahead_layers,
        " (>= 1), rematch_interval_steps ", config.rematch_interval_steps,
        " (>= 1), max_rematches_per_step ", config.max_rematches_per_step, " (>= 1)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertCacheDriver>> ExpertCacheDriver::Create(
    const ModelInfo& model, int32_t cache_slots, const ExpertCacheDriverConfig& config) {
  if (model.num_experts <= 0 || model.num_layers <= 0 || cache_slots <= 0) {
    return std::unique_ptr<ExpertCacheDriver>();
  }
  if (absl::Status status = CheckConfig(config); !status.ok()) return status;
  // A model that does not say which layers are sparse has experts in every layer.
  std::vector<int32_t> moe_layer_of(model.num_layers, -1);
  int32_t num_moe_layers = 0;
  for (int32_t l = 0; l < model.num_layers; ++l) {
    const bool sparse = model.sparse_layers.empty() ||
                        (static_cast<size_t>(l) < model.sparse_layers.size() &&
                         model.sparse_layers[l]);
    if (sparse) moe_layer_of[l] = num_moe_layers++;
  }
  if (num_moe_layers == 0) return std::unique_ptr<ExpertCacheDriver>();
  const int64_t num_routed = int64_t{num_moe_layers} * model.num_experts;
  ExpertCacheConfig cache;
  cache.num_layers = num_moe_layers;
  cache.num_experts = model.num_experts;
  cache.capacity_slots = static_cast<int32_t>(std::min<int64_t>(cache_slots, num_routed));
  cache.enable_prefetch = config.max_prefetch_per_step > 0;
  cache.prefetch_lookahead_layers = config.prefetch_lookahead_layers;
  absl::StatusOr<std::unique_ptr<ExpertCachePolicy>> policy =
      ExpertCachePolicy::Create(config.policy, cache);
  if (!policy.ok()) return policy.status();
  absl::StatusOr<TraceCollection> collection = TraceCollection::Create(
      num_moe_layers, model.num_experts, {.capacity = config.trace_capacity});
  if (!collection.ok()) return collection.status();
  absl::StatusOr<ExpertPredictor> predictor =
      ExpertPredictor::Create({.top_k = std::max(1, model.num_experts_per_tok)});
  if (!predictor.ok()) return predictor.status();
  absl::StatusOr<ActivationMatrix> popularity =
      ActivationMatrix::Zeros(num_moe_layers, model.num_experts);
  if (!popularity.ok()) return popularity.status();
  return std::unique_ptr<ExpertCacheDriver>(new ExpertCacheDriver(
      config, std::move(moe_layer_of), num_moe_layers, model.num_experts, *std::move(policy),
      *std::move(collection), *std::move(predictor), *std::move(popularity)));
}

ExpertCacheDriver::ExpertCacheDriver(const ExpertCacheDriverConfig& config,
                                     std::vector<int32_t> moe_layer_of, int32_t num_moe_layers,
                                     int32_t num_experts,
                                     std::unique_ptr<ExpertCachePolicy> policy,
                                     TraceCollection collection, ExpertPredictor predictor,
                                     ActivationMatrix popularity)
    : config_(config),
      moe_layer_of_(std::move(moe_layer_of)),
      num_moe_layers_(num_moe_layers),
      num_experts_(num_experts),
      policy_(std::move(policy)),
      collection_(std::move(collection)),
      predictor_(std::move(predictor)),
      popularity_(std::move(popularity)),
      used_(static_cast<size_t>(num_moe_layers) * num_experts, 0) {}

ExpertCacheDriver::RequestTrace& ExpertCacheDriver::Trace(RequestId request) {
  auto [it, inserted] = traces_.try_emplace(request);
  if (inserted) {
    // The dimensions were checked at Create.
    it->second.matrix = *ActivationMatrix::Zeros(num_moe_layers_, num_experts_);
  }
  return it->second;
}

const ActivationMatrix* ExpertCacheDriver::RequestMatrix(RequestId request) const {
  auto it = traces_.find(request);
  return it == traces_.end() ? nullptr : &it->second.matrix;
}

void ExpertCacheDriver::RefreshPrior(RequestTrace& trace, bool match) {
  std::vector<ExpertMatch> matches;
  if (match) {
    // Shapes agree by construction, so neither call can fail.
    matches = *predictor_.Match(trace.matrix, collection_);
    if (!matches.empty()) collection_.CreditMatch(matches.front().entry_id);
    trace.matched_step = step_;
    trace.matched_total = trace.matrix.total();
  }
  trace.prior = *predictor_.Prior(matches, collection_, &popularity_);
}

void ExpertCacheDriver::Forecast(std::span<const RequestId> requests) {
  // Layer 0: the step starts there (see the header).
  ExpertForecast batch = *ExpertForecast::Zeros(num_moe_layers_, num_experts_, 0);
  int32_t num_rematched = 0;
  for (RequestId id : requests) {
    RequestTrace& trace = Trace(id);
    const bool has_tokens = trace.matrix.total() > 0;
    // First evidence, or a stale match; a request already matched in this step (another of its
    // choices) is not matched again.
    const bool due = has_tokens && trace.matched_step != step_ &&
                     (trace.matched_total == 0 ||
                      step_ - trace.matched_step >= config_.rematch_interval_steps);
    if (due && num_rematched < config_.max_rematches_per_step) {
      RefreshPrior(trace, /*match=*/true);
      ++num_rematched;
    } else if (trace.prior.empty()) {
      RefreshPrior(trace, /*match=*/false);  // popularity only: no scan of the collection
    }
    (void)predictor_.AddForecast(trace.matrix, trace.prior, &batch);  // shapes agree
  }
  (void)policy_->SetForecast(std::move(batch));  // shapes agree
}

void ExpertCacheDriver::PlanStep(std::span<const RequestId> requests, StepPlan& plan) {
  ++step_;
  plan.expert_prefetch.clear();
  plan.expert_scores.clear();
  if (policy_->UsesForecast() && !requests.empty()) {
    Forecast(requests);
    ExpertPrefetchPlan prefetch = policy_->PlanPrefetch(config_.max_prefetch_per_step);
    plan.expert_prefetch = std::move(prefetch.loads);
  }
  plan.expert_scores.reserve(static_cast<size_t>(policy_->num_resident()));
  for (int32_t l = 0; l < num_moe_layers_; ++l) {
    for (int32_t e = 0; e < num_experts_; ++e) {
      const ExpertKey key{l, e};
      if (policy_->IsResident(key)) plan.expert_scores.push_back({key, policy_->KeepScore(key)});
    }
  }
}

absl::Status ExpertCacheDriver::AddRouting(RequestId request, std::span<const int32_t> counts) {
  if (counts.empty()) return absl::OkStatus();
  const size_t num_layers = moe_layer_of_.size();
  if (counts.size() != num_layers * num_experts_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert routing record holds ", counts.size(), " counts; the model's ", num_layers,
        " layers x ", num_experts_, " experts need ", num_layers * num_experts_));
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert routing count ", i, " is negative (", counts[i], ")"));
    }
  }
  RequestTrace& trace = Trace(request);
  for (size_t l = 0; l < num_layers; ++l) {
    const int32_t m = moe_layer_of_[l];
    if (m < 0) continue;  // a dense layer: its row is zero by contract
    for (int32_t e = 0; e < num_experts_; ++e) {
      const int32_t n = counts[l * num_experts_ + e];
      if (n == 0) continue;
      // In range and non-negative (checked above), so the adds cannot fail.
      (void)trace.matrix.Add({m, e}, n);
      (void)popularity_.Add({m, e}, n);
      used_[static_cast<size_t>(m) * num_experts_ + e] = 1;
    }
  }
  return absl::OkStatus();
}

void ExpertCacheDriver::EndStep() {
  for (int32_t l = 0; l < num_moe_layers_; ++l) {
    for (int32_t e = 0; e < num_experts_; ++e) {
      uint8_t& used = used_[static_cast<size_t>(l) * num_experts_ + e];
      if (used == 0) continue;
      used = 0;
      // The driver pins nothing, so an access always finds room.
      (void)policy_->Access({l, e});
    }
  }
}

void ExpertCacheDriver::FinishRequest(RequestId request) {
  auto it = traces_.find(request);
  if (it == traces_.end()) return;
  (void)collection_.Insert(it->second.matrix);  // same shape; an empty matrix is ignored
  traces_.erase(it);
}

}  // namespace loom
