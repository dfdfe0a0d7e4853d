// A bounded collection of past requests' expert activation matrices (MoE-Infinity's EAMC), the
// memory the expert predictor matches running requests against.
//
// Every entry holds the summed counts of one or more finished requests. Insert(m) of a matrix
// with at least one routed token:
//   1. fewer than `capacity` entries: m becomes a new entry (kAppended);
//   2. full, and some entry e is near-identical to m — min(m.Similarity(e), e.Similarity(m)) >=
//      `merge_similarity` (ActivationMatrix, over every layer) — m's counts are added to the
//      most similar such entry (the earliest slot on a tie) (kMerged). Summed counts keep the
//      entry's shape (cosine ignores scale) and make it the centroid of the requests it holds;
//   3. full, nothing near-identical: the least useful entry is replaced by m (kReplaced).
//      Usefulness is the entry's best-match credit (CreditMatch: the predictor's best match for
//      a running request), decayed by half every `capacity` insertions since it was earned, so
//      the collection follows a drifting workload. Least useful = lowest decayed credit, then
//      least recently touched (appended, merged into or credited), then earliest slot.
// A matrix with no routed tokens (a request aborted before its first step) is ignored.
//
// Deterministic: the same calls in the same order give the same entries, ids and outcomes.
// Not thread-safe; the engine loop thread owns it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "scheduler/experts/activation_matrix.h"

namespace loom {

struct TraceCollectionConfig {
  // Most entries held (>= 1).
  int32_t capacity = 1000;
  // Symmetric similarity, in (0, 1], at or above which a new matrix merges into an entry once
  // the collection is full.
  double merge_similarity = 0.95;
};

// One entry. `id` is unique for the collection's lifetime and increases with insertion order;
// a merge keeps the entry's id, a replacement gives the slot a new one.
struct TraceEntry {
  uint64_t id = 0;
  ActivationMatrix matrix;
  // Finished requests whose counts it holds.
  int32_t num_requests = 0;
  // Best-match credit and the insertion count at which it was last brought up to date.
  double credit = 0.0;
  int64_t credit_epoch = 0;
  // Sequence number of the last append, merge or credit (larger is more recent).
  int64_t last_touched = 0;
};

class TraceCollection {
 public:
  enum class InsertOutcome { kIgnored, kAppended, kMerged, kReplaced };
  struct InsertResult {
    InsertOutcome outcome = InsertOutcome::kIgnored;
    // The entry that now holds the matrix (0 when ignored).
    uint64_t entry_id = 0;
    // kReplaced: the id of the entry that was dropped.
    uint64_t replaced_id = 0;
  };

  // InvalidArgument for non-positive dimensions, capacity < 1, or merge_similarity outside (0, 1].
  static absl::StatusOr<TraceCollection> Create(int32_t num_layers, int32_t num_experts,
                                                const TraceCollectionConfig& config);

  // See the file comment. InvalidArgument (nothing changes) when the shape differs.
  absl::StatusOr<InsertResult> Insert(const ActivationMatrix& matrix);

  // One best-match credit for `entry_id`; an id no longer held (replaced since) is ignored.
  void CreditMatch(uint64_t entry_id);

  // Entries in slot order (stable: an entry keeps its slot until it is replaced).
  std::span<const TraceEntry> entries() const { return entries_; }
  // The entry with `id`, or null.
  const TraceEntry* Find(uint64_t id) const;
  // An entry's credit decayed to now (what replacement compares).
  double DecayedCredit(const TraceEntry& entry) const;

  int32_t size() const { return static_cast<int32_t>(entries_.size()); }
  bool empty() const { return entries_.empty(); }
  int32_t capacity() const { return config_.capacity; }
  int32_t num_layers() const { return num_layers_; }
  int32_t num_experts() const { return num_experts_; }
  // Matrices inserted so far (ignored ones not counted).
  int64_t num_insertions() const { return num_insertions_; }

 private:
  TraceCollection(int32_t num_layers, int32_t num_experts, const TraceCollectionConfig& config)
      : num_layers_(num_layers), num_experts_(num_experts), config_(config) {}
  int32_t LeastUseful() const;

  int32_t num_layers_;
  int32_t num_experts_;
  TraceCollectionConfig config_;
  std::vector<TraceEntry> entries_;
  absl::flat_hash_map<uint64_t, int32_t> slot_of_;  // id -> index in entries_
  uint64_t next_id_ = 1;
  int64_t num_insertions_ = 0;
  int64_t clock_ = 0;
};

}  // namespace loom
