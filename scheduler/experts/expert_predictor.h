// Expert predictor: from a running request's activation matrix so far and the collection of past
// requests' matrices, the probability that the request's next tokens use each expert of each
// layer, and how urgent each layer is (MoE-Infinity's activation-aware prediction).
//
// For a request R at `current_layer` c (the next MoE layer to run; R's matrix holds its prompt,
// its earlier decode tokens and this step's layers before c):
//   1. Match: the `num_matches` entries of the collection most similar to R
//      (R.Similarity(entry), ActivationMatrix: cosine per layer over the layers R has tokens in,
//      averaged), ties by lower entry id; only similarities > 0 count.
//   2. Prior, per layer l: the mix of the matched entries' normalised rows, each weighted by
//      similarity^similarity_power (the closest match dominates; a weak one barely counts),
//      over the matches with tokens in l. With no such match (an empty collection, nothing
//      similar): the normalised row of `popularity` (every routing the caller has seen, live
//      requests included); with no popularity either: uniform, 1 / num_experts.
//   3. Posterior, per layer: R's own counts with the prior as a pseudo-count of
//      `history_prior_tokens` routed tokens: share(l, e) = (k0 prior(l, e) + n(l, e)) / (k0 + n(l)),
//      so a fresh request follows its matches and a long one its own history.
//   4. Probability that a token uses the expert: min(1, top_k * share(l, e)).
// Layer proximity: a decoding request runs every layer once per token, so after c comes c+1 ...
// L-1 and then 0 ... c-1 of its next token. The distance of layer l is d = (l - c) mod L.
// Priority (how much to keep an expert) follows Belady: the sooner its next use is expected, the
// higher. Layer l comes up after d layer-steps, and each later step (L apart) uses (l, e) with
// probability q (use_probability), so its next use is expected after T = d + L (1 - q) / q
// steps, and its priority is 1 / (1 + T): 1 for a sure expert of the layer about to run, 0 for
// one never used. A sure expert of the layer just run (d = L - 1) thus outranks an unlikely one
// of the next layer, which a weight linear in d alone would evict first.
// A batch is the union of its requests' forecasts (ExpertForecast::Add). Its probability is the
// sum of theirs, the expected number of the batch's requests that route a token to the expert
// per step; where that exceeds 1 it scales the priority, so an expert two requests need outranks
// one that one request surely needs (max would tie them). Its q is the chance that any of them
// uses the expert, 1 - prod (1 - q_i) (for one request, min(1, probability)): eight requests
// that each use an expert one time in eight make it likely (0.66), not sure.
//
// Stateless apart from its config; the caller credits the collection's best match
// (TraceCollection::CreditMatch) so that replacement keeps useful entries. Thread-compatible.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/api/expert_hints.h"
#include "scheduler/experts/activation_matrix.h"
#include "scheduler/experts/trace_collection.h"

namespace loom {

struct ExpertPredictorConfig {
  // Experts each token is routed to (the model's top-k), >= 1.
  int32_t top_k = 2;
  // Best-matching entries mixed into the prior, >= 1.
  int32_t num_matches = 4;
  // A match's weight is similarity^similarity_power (>= 0; 0 weighs every match the same).
  double similarity_power = 8.0;
  // Weight of the prior against the request's own counts, in routed tokens (>= 0).
  double history_prior_tokens = 32.0;
};

// One matched entry of the collection.
struct ExpertMatch {
  uint64_t entry_id = 0;
  double similarity = 0.0;
};

// Predicted use of every expert, as of `current_layer` (see the file comment).
class ExpertForecast {
 public:
  ExpertForecast() = default;
  // All probabilities zero. InvalidArgument for non-positive dimensions or a current layer
  // outside [0, num_layers).
  static absl::StatusOr<ExpertForecast> Zeros(int32_t num_layers, int32_t num_experts,
                                              int32_t current_layer);

  int32_t num_layers() const { return num_layers_; }
  int32_t num_experts() const { return num_experts_; }
  int32_t current_layer() const { return current_layer_; }

  // Probability that a step uses `key` (a batch union: expected number of requests using it).
  double probability(ExpertKey key) const { return probability_[Index(key)]; }
  // Probability that at least one of the batch's requests uses `key` in a step (for one request,
  // min(1, probability)).
  double use_probability(ExpertKey key) const { return 1.0 - none_[Index(key)]; }
  // Sets `key` as one request's forecast would: probability p, used with probability min(1, p).
  void set_probability(ExpertKey key, double p) {
    probability_[Index(key)] = p;
    none_[Index(key)] = 1.0 - std::clamp(p, 0.0, 1.0);
  }
  // Adds one more request that uses `key` with probability p (in [0, 1]).
  void AddRequest(ExpertKey key, double p) {
    probability_[Index(key)] += p;
    none_[Index(key)] *= 1.0 - std::clamp(p, 0.0, 1.0);
  }
  // Layers after current_layer before `layer` runs (cyclic).
  int32_t LayerDistance(int32_t layer) const {
    return (layer - current_layer_ + num_layers_) % num_layers_;
  }
  // Expected layer-steps to the next use (see the file comment); infinite for probability 0.
  double ReuseDistance(ExpertKey key) const {
    const double q = use_probability(key);
    if (q <= 0.0) return std::numeric_limits<double>::infinity();
    return LayerDistance(key.layer) + num_layers_ * (1.0 - q) / q;
  }
  // 1 / (1 + ReuseDistance), times the summed probability where it exceeds 1 (a batch).
  double Priority(ExpertKey key) const {
    return std::max(1.0, probability(key)) / (1.0 + ReuseDistance(key));
  }

  // Union with another request's forecast: probabilities add. InvalidArgument (nothing changes)
  // unless both have the same shape and current layer.
  absl::Status Add(const ExpertForecast& other);

 private:
  size_t Index(ExpertKey key) const {
    return static_cast<size_t>(key.layer) * num_experts_ + key.expert;
  }
  int32_t num_layers_ = 0;
  int32_t num_experts_ = 0;
  int32_t current_layer_ = 0;
  std::vector<double> probability_;  // [num_layers, num_experts]
  std::vector<double> none_;         // [num_layers, num_experts]: no request uses it
};

class ExpertPredictor {
 public:
  // InvalidArgument for a config outside the ranges documented on its fields.
  static absl::StatusOr<ExpertPredictor> Create(const ExpertPredictorConfig& config);

  const ExpertPredictorConfig& config() const { return config_; }

  // Step 1: best matches, most similar first. InvalidArgument on a shape mismatch.
  absl::StatusOr<std::vector<ExpertMatch>> Match(const ActivationMatrix& request,
                                                 const TraceCollection& collection) const;

  // Step 2: [num_layers, num_experts] shares, every row summing to 1. `popularity` may be null;
  // matches whose entry is no longer held are skipped. InvalidArgument on a shape mismatch.
  absl::StatusOr<std::vector<double>> Prior(std::span<const ExpertMatch> matches,
                                            const TraceCollection& collection,
                                            const ActivationMatrix* popularity) const;

  // Steps 3 and 4 for `request` at `current_layer`, from a prior made by Prior (a caller may
  // keep a request's prior across layers and rematch only now and then). InvalidArgument on a
  // shape mismatch or a layer outside the matrix.
  absl::StatusOr<ExpertForecast> Forecast(const ActivationMatrix& request,
                                          std::span<const double> prior,
                                          int32_t current_layer) const;

  // Steps 3 and 4 for `request`, added into `batch` (a batch union built in place, so a step
  // that forecasts many requests allocates one forecast, not one per request); the forecast is
  // as of batch's current layer. InvalidArgument, with nothing added, on a shape mismatch.
  absl::Status AddForecast(const ActivationMatrix& request, std::span<const double> prior,
                           ExpertForecast* batch) const;

  // All steps at once.
  absl::StatusOr<ExpertForecast> Predict(const ActivationMatrix& request, int32_t current_layer,
                                         const TraceCollection& collection,
                                         const ActivationMatrix* popularity) const;

 private:
  explicit ExpertPredictor(const ExpertPredictorConfig& config) : config_(config) {}
  ExpertPredictorConfig config_;
};

}  // namespace loom
