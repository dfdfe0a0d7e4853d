// The expert-cache policy in the step loop (issue 18 item 3): what the Scheduler runs, step by
// step, for a mixture-of-experts model whose experts live behind the engine's expert cache
// (KvCapacity::expert_cache_slots > 0).
//
// It owns an ExpertCachePolicy (a mirror of the engine's fast tier), a TraceCollection of
// finished requests' activation matrices, an ExpertPredictor, one ActivationMatrix per running
// request and the popularity of every expert (all routing seen):
//   PlanStep   (Schedule): forecasts the step's requests (the policy uses forecasts only for
//              "activation"), unites them, and fills the plan's `expert_prefetch` from the
//              policy's prefetch plan (most urgent first) and `expert_scores` with the policy's
//              keep-score of every resident expert (ExpertCachePolicy::KeepScore).
//   AddRouting (Update): one sequence's SequenceOutput::expert_counts join its request's matrix
//              and the popularity, and mark the experts the step used.
//   EndStep    (Update): the union of the step's experts goes through the mirror (Access, layer
//              by layer, the order the engine ran them), so LRU recency, LFU counts and the
//              activation policy's ties follow what the engine did.
//   FinishRequest: the request's matrix joins the collection (whatever the reason it ended).
//
// Layers: only the model's sparse layers (ModelInfo::sparse_layers) have experts, so the
// matrices, the mirror and the keys in the plan count MoE layers only, in decoder order
// (ExpertKey::layer = the ordinal of the MoE layer, engine/api/expert_hints.h); dense layers'
// zero rows of expert_counts are dropped. A model with every layer sparse (Mixtral, Qwen3-MoE)
// has the same numbers either way.
//
// Matrices count what the engine computed: a sequence preempted by recompute routes its prompt
// again and it counts twice (similarity is a cosine, so this only weighs the prompt more); a
// request that migrates in starts with an empty matrix (MigrantState carries none).
//
// Granularity: the scheduler plans whole steps, so a forecast is made at layer 0 (the next step
// starts there): the layer that runs first is served on demand and prefetch covers the next
// `prefetch_lookahead_layers` MoE layers (ActivationPolicy), with urgency falling with distance.
//
// Bounded work per step: a request's prior (matching against the collection, the costly part) is
// recomputed when it first has routed tokens and then every `rematch_interval_steps` steps, at
// most `max_rematches_per_step` requests per step (the others keep their prior); forecasts add
// into one batch forecast; the prefetch plan loads at most `max_prefetch_per_step` experts.
//
// The mirror is a model of the engine's cache, not a copy: the engine may drop hints, loads a
// step's prefetches after its forward pass (the mirror before its accesses) and never reports its
// resident set, so the two can drift; the engine serves every step's needs whatever the mirror
// says, so drift costs hit rate, never correctness. The engine's own counters
// (StepResult::expert_cache) are the figures operators see.
//
// Not thread-safe; the engine loop thread owns it (through the Scheduler).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/api/model_info.h"
#include "engine/api/step.h"
#include "scheduler/experts/activation_matrix.h"
#include "scheduler/experts/expert_cache_policy.h"
#include "scheduler/experts/expert_predictor.h"
#include "scheduler/experts/trace_collection.h"
#include "scheduler/request.h"

namespace loom {

struct ExpertCacheDriverConfig {
  // ExpertCachePolicy::Names(): "activation", "lru" or "lfu".
  std::string policy = "activation";
  // Finished requests' matrices kept for matching (TraceCollectionConfig::capacity, >= 1).
  int32_t trace_capacity = 256;
  // Most experts one plan hints (>= 0; 0 turns prefetching off).
  int32_t max_prefetch_per_step = 16;
  // MoE layers after the first a plan prefetches for (ExpertCacheConfig, >= 1).
  int32_t prefetch_lookahead_layers = 4;
  // A request's prior is rematched this many steps after its last match (>= 1) ...
  int32_t rematch_interval_steps = 8;
  // ... for at most this many requests per step (>= 1).
  int32_t max_rematches_per_step = 4;
};

class ExpertCacheDriver {
 public:
  // A driver for `model` with a fast tier of `cache_slots` experts (clamped to the model's
  // number of routed experts), or null when there is nothing to drive: a dense model or no
  // slots. InvalidArgument for an unknown policy or a config outside its ranges.
  static absl::StatusOr<std::unique_ptr<ExpertCacheDriver>> Create(
      const ModelInfo& model, int32_t cache_slots, const ExpertCacheDriverConfig& config);

  // Fills plan.expert_prefetch and plan.expert_scores (see the file comment). `requests` names
  // the request of each sequence in the plan, in plan order (a request with several running
  // choices appears once per sequence: each routes its own tokens).
  void PlanStep(std::span<const RequestId> requests, StepPlan& plan);

  // One sequence's routing for the step (SequenceOutput::expert_counts, [num_layers,
  // num_experts] over all decoder layers). An empty record adds nothing; InvalidArgument, with
  // nothing added, for a record of another size or with a negative count.
  absl::Status AddRouting(RequestId request, std::span<const int32_t> counts);

  // The experts the step's AddRouting calls named go through the mirror; call once per step.
  void EndStep();

  // The request ended (finished, aborted, failed or moved away): its matrix, if it routed any
  // token, joins the collection. Unknown ids are ignored.
  void FinishRequest(RequestId request);

  // ---- Inspection (tests, stats) -------------------------------------------------------------
  const ExpertCachePolicy& policy() const { return *policy_; }
  const TraceCollection& collection() const { return collection_; }
  // The request's matrix so far, or null when it has none (never seen, or finished).
  const ActivationMatrix* RequestMatrix(RequestId request) const;
  // Routed tokens of every request so far.
  const ActivationMatrix& popularity() const { return popularity_; }
  int32_t num_moe_layers() const { return num_moe_layers_; }
  int32_t num_experts() const { return num_experts_; }

 private:
  // A running request: its matrix and the prior its forecasts use.
  struct RequestTrace {
    ActivationMatrix matrix;
    std::vector<double> prior;  // empty until first computed
    int64_t matched_step = -1;  // step of the last match against the collection (-1: never)
    int64_t matched_total = 0;  // the matrix's total then
  };

  ExpertCacheDriver(const ExpertCacheDriverConfig& config, std::vector<int32_t> moe_layer_of,
                    int32_t num_moe_layers, int32_t num_experts,
                    std::unique_ptr<ExpertCachePolicy> policy, TraceCollection collection,
                    ExpertPredictor predictor, ActivationMatrix popularity);

  RequestTrace& Trace(RequestId request);
  // Recomputes `trace`'s prior; `match` compares it with the collection (else popularity only).
  void RefreshPrior(RequestTrace& trace, bool match);
  void Forecast(std::span<const RequestId> requests);

  ExpertCacheDriverConfig config_;
  std::vector<int32_t> moe_layer_of_;  // [num_layers]: MoE ordinal, -1 for a dense layer
  int32_t num_moe_layers_;
  int32_t num_experts_;
  std::unique_ptr<ExpertCachePolicy> policy_;
  TraceCollection collection_;
  ExpertPredictor predictor_;
  ActivationMatrix popularity_;
  absl::flat_hash_map<RequestId, RequestTrace> traces_;
  std::vector<uint8_t> used_;  // [num_moe_layers, num_experts]: this step's experts
  int64_t step_ = 0;
};

}  // namespace loom
