#include "scheduler/experts/activation_matrix.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

absl::Status CheckShape(int32_t num_layers, int32_t num_experts) {
  if (num_layers <= 0 || num_experts <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("activation matrix needs positive dimensions, got ",
                                                   num_layers, " layers x ", num_experts,
                                                   " experts"));
  }
  return absl::OkStatus();
}

absl::Status CheckCounts(std::span<const int32_t> counts) {
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("routing count ", i, " is negative (", counts[i], ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

ActivationMatrix::ActivationMatrix(int32_t num_layers, int32_t num_experts)
    : num_layers_(num_layers),
      num_experts_(num_experts),
      counts_(static_cast<size_t>(num_layers) * num_experts, 0),
      layer_totals_(num_layers, 0) {}

absl::StatusOr<ActivationMatrix> ActivationMatrix::Zeros(int32_t num_layers,
                                                         int32_t num_experts) {
  if (absl::Status status = CheckShape(num_layers, num_experts); !status.ok()) return status;
  return ActivationMatrix(num_layers, num_experts);
}

absl::StatusOr<ActivationMatrix> ActivationMatrix::FromCounts(int32_t num_layers,
                                                              int32_t num_experts,
                                                              std::span<const int32_t> counts) {
  absl::StatusOr<ActivationMatrix> matrix = Zeros(num_layers, num_experts);
  if (!matrix.ok()) return matrix.status();
  if (absl::Status status = matrix->AddCounts(num_layers, num_experts, counts); !status.ok()) {
    return status;
  }
  return matrix;
}

absl::Status ActivationMatrix::Add(ExpertKey key, int64_t num_tokens) {
  if (!Contains(key)) {
    return absl::InvalidArgumentError(absl::StrCat("expert L", key.layer, "/E", key.expert,
                                                   " is outside the ", num_layers_, " x ",
                                                   num_experts_, " activation matrix"));
  }
  if (num_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative token count ", num_tokens));
  }
  counts_[Index(key)] += num_tokens;
  layer_totals_[key.layer] += num_tokens;
  total_ += num_tokens;
  return absl::OkStatus();
}

absl::Status ActivationMatrix::AddCounts(int32_t num_layers, int32_t num_experts,
                                         std::span<const int32_t> counts) {
  if (num_layers != num_layers_ || num_experts != num_experts_) {
    return absl::InvalidArgumentError(absl::StrCat("routing counts are ", num_layers, " x ",
                                                   num_experts, ", the matrix is ", num_layers_,
                                                   " x ", num_experts_));
  }
  if (counts.size() != counts_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("routing counts hold ", counts.size(),
                                                   " values, ", num_layers, " x ", num_experts,
                                                   " needs ", counts_.size()));
  }
  if (absl::Status status = CheckCounts(counts); !status.ok()) return status;
  for (size_t i = 0; i < counts.size(); ++i) {
    counts_[i] += counts[i];
    layer_totals_[i / num_experts_] += counts[i];
    total_ += counts[i];
  }
  return absl::OkStatus();
}

absl::Status ActivationMatrix::Merge(const ActivationMatrix& other) {
  if (!SameShape(other)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot merge a ", other.num_layers_, " x ",
                                                   other.num_experts_, " activation matrix into a ",
                                                   num_layers_, " x ", num_experts_, " one"));
  }
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  for (int32_t l = 0; l < num_layers_; ++l) layer_totals_[l] += other.layer_totals_[l];
  total_ += other.total_;
  return absl::OkStatus();
}

std::vector<double> ActivationMatrix::NormalizedRow(int32_t layer) const {
  std::vector<double> out(num_experts_, 0.0);
  const int64_t sum = layer_totals_[layer];
  if (sum == 0) return out;
  std::span<const int64_t> counts = row(layer);
  for (int32_t e = 0; e < num_experts_; ++e) {
    out[e] = static_cast<double>(counts[e]) / static_cast<double>(sum);
  }
  return out;
}

double ActivationMatrix::Similarity(const ActivationMatrix& other, int32_t num_layers) const {
  if (!SameShape(other)) return 0.0;
  const int32_t limit = std::clamp(num_layers, 0, num_layers_);
  double sum = 0.0;
  int32_t num_compared = 0;
  for (int32_t l = 0; l < limit; ++l) {
    if (layer_totals_[l] == 0) continue;  // no evidence in the query
    ++num_compared;
    if (other.layer_totals_[l] == 0) continue;  // cosine 0
    std::span<const int64_t> a = row(l);
    std::span<const int64_t> b = other.row(l);
    double dot = 0.0, norm_a = 0.0, norm_b = 0.0;
    for (int32_t e = 0; e < num_experts_; ++e) {
      const double x = static_cast<double>(a[e]);
      const double y = static_cast<double>(b[e]);
      dot += x * y;
      norm_a += x * x;
      norm_b += y * y;
    }
    sum += dot / std::sqrt(norm_a * norm_b);
  }
  return num_compared == 0 ? 0.0 : sum / num_compared;
}

}  // namespace loom
