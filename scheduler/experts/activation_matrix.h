// Expert activation matrix (MoE-Infinity's EAM): for one request, how many tokens the router
// sent to each expert of each MoE layer, over its prompt and every decode step so far.
//
// Plain data: a [num_layers, num_experts] matrix of non-negative counts, row-major. It can be
// built from, and added to with, the engine's per-sequence routing record in its flat form
// (num_layers, num_experts, counts row-major), so a step result feeds it without conversion.
//
// Similarity (used to find past requests that routed like this one):
//   a.Similarity(b, L) = mean over the layers l < L in which `a` has routed tokens of
//                        cos(a[l], b[l]) = <a[l], b[l]> / (|a[l]| |b[l]|),
// where a layer in which `b` has no tokens contributes 0. Layers in which `a` (the query) has no
// tokens carry no evidence and are skipped, so a request that has only run its first layers is
// compared on exactly those layers. Cosine does not depend on a row's scale, so the rows need no
// normalisation first and a long request compares equally with a short one. The result is in
// [0, 1] (counts are non-negative); 0 when `a` has no tokens in the first L layers. Not
// symmetric when the two matrices have tokens in different layers.
//
// Not thread-safe; a value type (copy to share).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/api/expert_hints.h"

namespace loom {

class ActivationMatrix {
 public:
  // An empty matrix of no layers; use Zeros or FromCounts for a real one.
  ActivationMatrix() = default;

  // All counts zero. InvalidArgument unless both dimensions are positive.
  static absl::StatusOr<ActivationMatrix> Zeros(int32_t num_layers, int32_t num_experts);

  // A matrix holding `counts` ([num_layers, num_experts], row-major). InvalidArgument when a
  // dimension is not positive, counts.size() != num_layers * num_experts, or a count is negative.
  static absl::StatusOr<ActivationMatrix> FromCounts(int32_t num_layers, int32_t num_experts,
                                                     std::span<const int32_t> counts);

  int32_t num_layers() const { return num_layers_; }
  int32_t num_experts() const { return num_experts_; }
  bool SameShape(const ActivationMatrix& other) const {
    return num_layers_ == other.num_layers_ && num_experts_ == other.num_experts_;
  }

  // Adds `num_tokens` (>= 0) routed tokens to `key`. InvalidArgument for a key outside the
  // matrix or a negative count (nothing changes).
  absl::Status Add(ExpertKey key, int64_t num_tokens = 1);

  // Adds a flat record of the same shape (the engine's routing counts for one sequence and one
  // step). InvalidArgument, with nothing added, on a shape mismatch or a negative count.
  absl::Status AddCounts(int32_t num_layers, int32_t num_experts,
                         std::span<const int32_t> counts);

  // Adds every count of `other` (same shape; InvalidArgument otherwise, nothing changes).
  absl::Status Merge(const ActivationMatrix& other);

  // Tokens routed to `key`; the key must be inside the matrix.
  int64_t count(ExpertKey key) const { return counts_[Index(key)]; }
  // Row `layer`: [num_experts] counts.
  std::span<const int64_t> row(int32_t layer) const {
    return std::span<const int64_t>(counts_).subspan(static_cast<size_t>(layer) * num_experts_,
                                                     num_experts_);
  }
  // Routed tokens in `layer` (top-k routing counts each token k times), and in the whole matrix.
  int64_t layer_total(int32_t layer) const { return layer_totals_[layer]; }
  int64_t total() const { return total_; }

  // Row `layer` divided by its total: the share of the layer's routed tokens each expert got
  // (sums to 1). All zeros when the layer has no tokens.
  std::vector<double> NormalizedRow(int32_t layer) const;

  // See the file comment. `num_layers` is clamped to [0, this->num_layers()]; the shapes must
  // match (0 otherwise).
  double Similarity(const ActivationMatrix& other, int32_t num_layers) const;
  // Over every layer.
  double Similarity(const ActivationMatrix& other) const {
    return Similarity(other, num_layers_);
  }

 private:
  ActivationMatrix(int32_t num_layers, int32_t num_experts);
  size_t Index(ExpertKey key) const {
    return static_cast<size_t>(key.layer) * num_experts_ + key.expert;
  }
  bool Contains(ExpertKey key) const {
    return key.layer >= 0 && key.layer < num_layers_ && key.expert >= 0 &&
           key.expert < num_experts_;
  }

  int32_t num_layers_ = 0;
  int32_t num_experts_ = 0;
  std::vector<int64_t> counts_;        // [num_layers, num_experts]
  std::vector<int64_t> layer_totals_;  // [num_layers]
  int64_t total_ = 0;
};

}  // namespace loom
