#include "scheduler/experts/trace_collection.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace loom {

absl::StatusOr<TraceCollection> TraceCollection::Create(int32_t num_layers, int32_t num_experts,
                                                        const TraceCollectionConfig& config) {
  if (num_layers <= 0 || num_experts <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("trace collection needs positive dimensions, got ",
                                                   num_layers, " x ", num_experts));
  }
  if (config.capacity < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace collection capacity must be >= 1, got ", config.capacity));
  }
  if (!(config.merge_similarity > 0.0 && config.merge_similarity <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trace collection merge_similarity must be in (0, 1], got ", config.merge_similarity));
  }
  return TraceCollection(num_layers, num_experts, config);
}

double TraceCollection::DecayedCredit(const TraceEntry& entry) const {
  if (entry.credit == 0.0) return 0.0;
  const double age = static_cast<double>(num_insertions_ - entry.credit_epoch);
  return entry.credit * std::exp2(-age / config_.capacity);
}

void TraceCollection::CreditMatch(uint64_t entry_id) {
  auto it = slot_of_.find(entry_id);
  if (it == slot_of_.end()) return;
  TraceEntry& entry = entries_[it->second];
  entry.credit = DecayedCredit(entry) + 1.0;
  entry.credit_epoch = num_insertions_;
  entry.last_touched = ++clock_;
}

const TraceEntry* TraceCollection::Find(uint64_t id) const {
  auto it = slot_of_.find(id);
  return it == slot_of_.end() ? nullptr : &entries_[it->second];
}

int32_t TraceCollection::LeastUseful() const {
  int32_t best = 0;
  double best_credit = DecayedCredit(entries_[0]);
  for (int32_t i = 1; i < size(); ++i) {
    const double credit = DecayedCredit(entries_[i]);
    if (credit < best_credit ||
        (credit == best_credit && entries_[i].last_touched < entries_[best].last_touched)) {
      best = i;
      best_credit = credit;
    }
  }
  return best;
}

absl::StatusOr<TraceCollection::InsertResult> TraceCollection::Insert(
    const ActivationMatrix& matrix) {
  if (matrix.num_layers() != num_layers_ || matrix.num_experts() != num_experts_) {
    return absl::InvalidArgumentError(absl::StrCat("activation matrix is ", matrix.num_layers(),
                                                   " x ", matrix.num_experts(),
                                                   ", the trace collection holds ", num_layers_,
                                                   " x ", num_experts_));
  }
  if (matrix.total() == 0) return InsertResult{};
  ++num_insertions_;
  const int64_t now = ++clock_;
  if (size() < config_.capacity) {
    const uint64_t id = next_id_++;
    entries_.push_back(TraceEntry{.id = id, .matrix = matrix, .num_requests = 1,
                                  .credit_epoch = num_insertions_, .last_touched = now});
    slot_of_[id] = size() - 1;
    return InsertResult{.outcome = InsertOutcome::kAppended, .entry_id = id};
  }
  int32_t nearest = -1;
  double nearest_similarity = 0.0;
  for (int32_t i = 0; i < size(); ++i) {
    const ActivationMatrix& other = entries_[i].matrix;
    const double similarity = std::min(matrix.Similarity(other), other.Similarity(matrix));
    if (similarity > nearest_similarity) {
      nearest = i;
      nearest_similarity = similarity;
    }
  }
  if (nearest >= 0 && nearest_similarity >= config_.merge_similarity) {
    TraceEntry& entry = entries_[nearest];
    // Shapes were checked above, so the merge cannot fail.
    (void)entry.matrix.Merge(matrix);
    ++entry.num_requests;
    entry.last_touched = now;
    return InsertResult{.outcome = InsertOutcome::kMerged, .entry_id = entry.id};
  }
  const int32_t slot = LeastUseful();
  TraceEntry& entry = entries_[slot];
  const uint64_t replaced = entry.id;
  slot_of_.erase(replaced);
  const uint64_t id = next_id_++;
  entry = TraceEntry{.id = id, .matrix = matrix, .num_requests = 1,
                     .credit_epoch = num_insertions_, .last_touched = now};
  slot_of_[id] = slot;
  return InsertResult{.outcome = InsertOutcome::kReplaced, .entry_id = id, .replaced_id = replaced};
}

}  // namespace loom
