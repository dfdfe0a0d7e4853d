#include "scheduler/experts/expert_predictor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

absl::Status ShapeMismatch(const char* what, int32_t layers, int32_t experts, int32_t want_layers,
                           int32_t want_experts) {
  return absl::InvalidArgumentError(absl::StrCat(what, " is ", layers, " x ", experts,
                                                 ", expected ", want_layers, " x ",
                                                 want_experts));
}

}  // namespace

absl::StatusOr<ExpertForecast> ExpertForecast::Zeros(int32_t num_layers, int32_t num_experts,
                                                     int32_t current_layer) {
  if (num_layers <= 0 || num_experts <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("forecast needs positive dimensions, got ",
                                                   num_layers, " x ", num_experts));
  }
  if (current_layer < 0 || current_layer >= num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("current layer ", current_layer,
                                                   " is outside [0, ", num_layers, ")"));
  }
  ExpertForecast forecast;
  forecast.num_layers_ = num_layers;
  forecast.num_experts_ = num_experts;
  forecast.current_layer_ = current_layer;
  forecast.probability_.assign(static_cast<size_t>(num_layers) * num_experts, 0.0);
  forecast.none_.assign(static_cast<size_t>(num_layers) * num_experts, 1.0);
  return forecast;
}

absl::Status ExpertForecast::Add(const ExpertForecast& other) {
  if (other.num_layers_ != num_layers_ || other.num_experts_ != num_experts_) {
    return ShapeMismatch("forecast", other.num_layers_, other.num_experts_, num_layers_,
                         num_experts_);
  }
  if (other.current_layer_ != current_layer_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot unite a forecast at layer ",
                                                   other.current_layer_, " with one at layer ",
                                                   current_layer_));
  }
  for (size_t i = 0; i < probability_.size(); ++i) {
    probability_[i] += other.probability_[i];
    none_[i] *= other.none_[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<ExpertPredictor> ExpertPredictor::Create(const ExpertPredictorConfig& config) {
  if (config.top_k < 1 || config.num_matches < 1 || !(config.similarity_power >= 0.0) ||
      !(config.history_prior_tokens >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert predictor config out of range: top_k ", config.top_k, " (>= 1), num_matches ",
        config.num_matches, " (>= 1), similarity_power ", config.similarity_power,
        " (>= 0), history_prior_tokens ", config.history_prior_tokens, " (>= 0)"));
  }
  return ExpertPredictor(config);
}

absl::StatusOr<std::vector<ExpertMatch>> ExpertPredictor::Match(
    const ActivationMatrix& request, const TraceCollection& collection) const {
  if (request.num_layers() != collection.num_layers() ||
      request.num_experts() != collection.num_experts()) {
    return ShapeMismatch("request matrix", request.num_layers(), request.num_experts(),
                         collection.num_layers(), collection.num_experts());
  }
  std::vector<ExpertMatch> matches;
  for (const TraceEntry& entry : collection.entries()) {
    const double similarity = request.Similarity(entry.matrix);
    if (similarity > 0.0) matches.push_back({entry.id, similarity});
  }
  auto better = [](const ExpertMatch& a, const ExpertMatch& b) {
    return a.similarity != b.similarity ? a.similarity > b.similarity : a.entry_id < b.entry_id;
  };
  const size_t keep = std::min(matches.size(), static_cast<size_t>(config_.num_matches));
  std::partial_sort(matches.begin(), matches.begin() + keep, matches.end(), better);
  matches.resize(keep);
  return matches;
}

absl::StatusOr<std::vector<double>> ExpertPredictor::Prior(
    std::span<const ExpertMatch> matches, const TraceCollection& collection,
    const ActivationMatrix* popularity) const {
  const int32_t num_layers = collection.num_layers();
  const int32_t num_experts = collection.num_experts();
  if (popularity != nullptr &&
      (popularity->num_layers() != num_layers || popularity->num_experts() != num_experts)) {
    return ShapeMismatch("popularity matrix", popularity->num_layers(),
                         popularity->num_experts(), num_layers, num_experts);
  }
  std::vector<const TraceEntry*> entries;
  std::vector<double> weights;
  for (const ExpertMatch& match : matches) {
    const TraceEntry* entry = collection.Find(match.entry_id);
    if (entry == nullptr) continue;
    entries.push_back(entry);
    weights.push_back(std::pow(match.similarity, config_.similarity_power));
  }
  std::vector<double> prior(static_cast<size_t>(num_layers) * num_experts, 0.0);
  for (int32_t l = 0; l < num_layers; ++l) {
    double* out = prior.data() + static_cast<size_t>(l) * num_experts;
    double weight_sum = 0.0;
    for (size_t i = 0; i < entries.size(); ++i) {
      const int64_t layer_total = entries[i]->matrix.layer_total(l);
      if (layer_total == 0 || weights[i] <= 0.0) continue;
      std::span<const int64_t> counts = entries[i]->matrix.row(l);
      const double scale = weights[i] / static_cast<double>(layer_total);
      for (int32_t e = 0; e < num_experts; ++e) out[e] += scale * static_cast<double>(counts[e]);
      weight_sum += weights[i];
    }
    if (weight_sum > 0.0) {
      for (int32_t e = 0; e < num_experts; ++e) out[e] /= weight_sum;
    } else if (popularity != nullptr && popularity->layer_total(l) > 0) {
      const std::vector<double> row = popularity->NormalizedRow(l);
      std::copy(row.begin(), row.end(), out);
    } else {
      std::fill(out, out + num_experts, 1.0 / num_experts);
    }
  }
  return prior;
}

absl::StatusOr<ExpertForecast> ExpertPredictor::Forecast(const ActivationMatrix& request,
                                                         std::span<const double> prior,
                                                         int32_t current_layer) const {
  absl::StatusOr<ExpertForecast> forecast =
      ExpertForecast::Zeros(request.num_layers(), request.num_experts(), current_layer);
  if (!forecast.ok()) return forecast.status();
  if (absl::Status status = AddForecast(request, prior, &*forecast); !status.ok()) return status;
  return forecast;
}

absl::Status ExpertPredictor::AddForecast(const ActivationMatrix& request,
                                          std::span<const double> prior,
                                          ExpertForecast* batch) const {
  const int32_t num_layers = request.num_layers();
  const int32_t num_experts = request.num_experts();
  if (prior.size() != static_cast<size_t>(num_layers) * num_experts) {
    return absl::InvalidArgumentError(absl::StrCat("prior holds ", prior.size(), " values, the ",
                                                   num_layers, " x ", num_experts,
                                                   " request needs ",
                                                   static_cast<size_t>(num_layers) * num_experts));
  }
  if (batch->num_layers() != num_layers || batch->num_experts() != num_experts) {
    return ShapeMismatch("forecast", batch->num_layers(), batch->num_experts(), num_layers,
                         num_experts);
  }
  const double k0 = config_.history_prior_tokens;
  for (int32_t l = 0; l < num_layers; ++l) {
    const double denominator = k0 + static_cast<double>(request.layer_total(l));
    std::span<const int64_t> counts = request.row(l);
    for (int32_t e = 0; e < num_experts; ++e) {
      const double prior_share = prior[static_cast<size_t>(l) * num_experts + e];
      // k0 = 0 and a layer without tokens: the prior alone.
      const double share = denominator > 0.0
                               ? (k0 * prior_share + static_cast<double>(counts[e])) / denominator
                               : prior_share;
      const ExpertKey key{l, e};
      batch->AddRequest(key, std::min(1.0, config_.top_k * share));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ExpertForecast> ExpertPredictor::Predict(const ActivationMatrix& request,
                                                        int32_t current_layer,
                                                        const TraceCollection& collection,
                                                        const ActivationMatrix* popularity) const {
  absl::StatusOr<std::vector<ExpertMatch>> matches = Match(request, collection);
  if (!matches.ok()) return matches.status();
  absl::StatusOr<std::vector<double>> prior = Prior(*matches, collection, popularity);
  if (!prior.ok()) return prior.status();
  return Forecast(request, *prior, current_layer);
}

}  // namespace loom
