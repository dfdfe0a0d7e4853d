// The in-process Executor: one model on one backend with its KV pool, running StepPlans
// (shared/ARCHITECTURE.md §3). It keeps each sequence's engine-side state (tokens, block table,
// computed count, sampling parameters) between steps, checks every plan against that state
// before changing anything, runs the forward pass over the ragged batch, and samples.
//
// All or nothing (engine/api/executor.h): a step's changes to sequence state are staged and
// committed only once every call that can fail (forward pass, device synchronization) has
// succeeded, so a failed step, refused or not, leaves every sequence as it was. What a failed
// step may have written is KV data of the positions it computes and of its copy destinations,
// blocks the plan gave to its own sequences, of its import destinations, blocks no sequence
// holds, and the residual tails of its new sequences; its exports' blobs are left untouched.
//
// KV transfers (engine/api/step.h KvImport, KvExport): validated with the rest of the plan; then
// block copies, imports and exports run in that order before the forward pass, and a new
// sequence that carries an imported tail has it written into the tail slot it is given. The
// exported blobs are filled only when the step succeeds.
//
// Thread safety: Execute is called by one thread (the engine loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/api/executor.h"
#include "engine/backend/backend.h"
#include "engine/experts/expert_store.h"
#include "engine/kv/kv_pool.h"
#include "engine/layers/rope_table.h"
#include "engine/models/decoder_model.h"
#include "engine/runtime/engine_config.h"
#include "engine/sampling/sampler.h"
#include "engine/weights/checkpoint.h"
#include "kernels/cpu/thread_pool.h"

namespace loom {

class LocalExecutor final : public Executor {
 public:
  // Loads the model of config.model_dir (config.json, generation_config.json when present, the
  // safetensors checkpoint), validates it, and sizes the KV pool.
  static absl::StatusOr<std::unique_ptr<LocalExecutor>> Create(const EngineConfig& config);
  ~LocalExecutor() override;

  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override;
  const ModelInfo& model_info() const override { return info_; }
  const KvCapacity& capacity() const override { return capacity_; }

  const ModelConfig& model_config() const { return model_->config(); }
  // DecoderModel::grouped_expert_tokens of the model.
  int32_t grouped_expert_tokens() const { return model_->grouped_expert_tokens(); }
  int num_threads() const { return host_pool_->num_threads(); }
  // Number of sequences the engine currently holds state for.
  size_t num_sequences() const { return sequences_.size(); }

  // Called, on the engine loop's thread, with the raw logits of every row a step computes (the
  // sampled position, and prompt positions when prompt_logprobs is requested) before they are
  // processed. For diagnostics and golden tests; empty by default.
  using LogitsObserver =
      std::function<void(SequenceId seq_id, int32_t position, std::span<const float> logits)>;
  void SetLogitsObserver(LogitsObserver observer) { logits_observer_ = std::move(observer); }

  // For tests: called with the step id after the forward pass of every step that computes
  // tokens; an error it returns is reported as if the device had failed at that point.
  using FaultInjector = std::function<absl::Status(uint64_t step_id)>;
  void SetFaultInjectorForTesting(FaultInjector injector) { fault_injector_ = std::move(injector); }

 private:
  struct Sequence {
    std::vector<TokenId> token_ids;
    int32_t num_prompt_tokens = 0;
    std::vector<int32_t> block_table;
    int32_t num_computed_tokens = 0;
    SamplingParams sampling;
    // Low-bit KV formats: the sequence's residual tail slot (-1 otherwise), and the first block
    // it computed itself (blocks before it came from the prefix cache and are never in its tail).
    int32_t tail_slot = -1;
    int32_t tail_first_block = 0;
  };
  // One sequence's part of the step.
  struct Entry {
    SequenceId seq_id;
    Sequence* seq = nullptr;
    int32_t num_scheduled = 0;
    int32_t first_row = 0;
    // A continuing sequence's block-table length before this step (to undo the blocks the
    // step appended); -1 for a new sequence.
    int32_t num_blocks_before = -1;
  };
  // A row whose logits the step needs: to sample (prompt_position < 0) or to score the prompt
  // token after `prompt_position`.
  struct LogitRequest {
    int32_t entry = 0;
    int32_t row = 0;
    int32_t prompt_position = -1;
  };

  LocalExecutor() = default;
  absl::Status Validate(const StepPlan& plan) const;
  absl::Status ValidateNew(const NewSequencePlan& plan) const;
  absl::Status ValidateBlocks(SequenceId id, const std::vector<int32_t>& existing,
                              const std::vector<BlockId>& added, int32_t num_tokens) const;
  // The plan's KV imports (block ids, layout, sizes; destinations that no sequence held after
  // the plan's releases, no new sequence and no block copy of the plan writes) and exports
  // (block ids, an output each, tail owners held after the releases), given the sequences the
  // plan finishes.
  absl::Status ValidateImports(const StepPlan& plan,
                               const absl::flat_hash_set<SequenceId>& finished) const;
  absl::Status ValidateExports(const StepPlan& plan,
                               const absl::flat_hash_set<SequenceId>& finished) const;
  // A new sequence's imported residual tail (engine/api/step.h NewSequencePlan::imported_tail).
  absl::Status ValidateImportedTail(const NewSequencePlan& plan) const;
  // Prepares the step without committing it: new sequences go to staged_, continuing ones get
  // their appended blocks, block copies and imports are queued, entries_ lists the step's
  // sequences.
  void Stage(const StepPlan& plan);
  // Runs the plan's exports into pending_exports_ (Commit hands them to the plan's blobs).
  absl::Status RunExports(const StepPlan& plan);
  // Undoes Stage after a failure.
  void Unstage();
  // Runs the staged step: the forward pass and sampling, no change to sequence state.
  absl::StatusOr<StepResult> Run(const StepPlan& plan, std::chrono::steady_clock::time_point start);
  // Makes the step's effects part of the engine state (nothing here can fail).
  void Commit(const StepPlan& plan, const StepResult& result);
  // Fills the step's host-side inputs and copies them to the backend. graph_batch > 0 pads the
  // batch to that many one-token sequences, the shape of a replayed decode graph.
  StepBatch BuildBatch(int32_t graph_batch);
  // The padded batch size of this step's graph, or 0 when it runs without one (the backend has
  // no graphs, or some sequence computes more than one token, or the batch is too large).
  int32_t GraphBatchSize() const;
  // Allocates the step-input buffer for the largest step, at fixed offsets.
  absl::Status AllocateStepInputs(int32_t max_tokens, int32_t max_seqs, int32_t max_blocks_per_seq);
  // Loading: the expert cache over `weights.experts` (still the checkpoint's views), its store
  // kept in expert_store_, its size in capacity_.
  absl::StatusOr<std::unique_ptr<ExpertProvider>> CreateExpertCache(
      const EngineConfig& config, const ModelConfig& model_config, const DecoderWeights& weights);
  // Low-bit KV formats: gives each new sequence of the step a free tail slot (the slots of the
  // sequences the plan finishes are free), writes the tails new sequences import, and copies
  // the tails that the plan's block copies of partial blocks carry.
  void AssignTailSlots(const StepPlan& plan);
  // The held sequence whose partial last block (kept in its tail) is `block`; null if none.
  const Sequence* PartialBlockOwner(int32_t block) const;
  // Fills each output's expert_counts from the model's routing of the step's rows.
  void CountExpertRouting(std::vector<SequenceOutput>& outputs);
  // The plan's expert scores and prefetch hints, to the expert store (expert cache only).
  void ApplyExpertHints(const StepPlan& plan);
  ExpertCacheCounters ExpertCounters() const;
  void CollectLogitRequests();
  void RunLogitRequests(std::vector<SequenceOutput>& outputs);
  void ProcessLogitRow(const LogitRequest& request, float* logits, SamplerScratch& scratch,
                       SequenceOutput& output);

  EngineConfig config_;
  ModelInfo info_;
  KvCapacity capacity_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<Backend> backend_;
  // A device backend's expert cache computing experts on the host: the host CPU's backend
  // (destroyed after the model, whose provider uses its ops).
  std::unique_ptr<Backend> host_compute_backend_;
  std::unique_ptr<DecoderModel> model_;
  // The expert store behind the model's expert provider, when an expert cache is on (owned by
  // the provider, which the model owns); null otherwise.
  ExpertStore* expert_store_ = nullptr;
  // The decoder layer of each sparse layer, in order (ModelInfo::sparse_layers).
  std::vector<int32_t> sparse_layer_index_;
  std::unique_ptr<KvPool> kv_;
  std::unique_ptr<RopeTable> rope_;
  // Threads for sampling: the CPU backend's pool, or an own one for other backends.
  std::unique_ptr<cpu::ThreadPool> own_pool_;
  cpu::ThreadPool* host_pool_ = nullptr;
  std::vector<SamplerScratch> sampler_scratch_;  // one per host thread
  // node_hash_map: step entries keep pointers to sequences across insertions.
  absl::node_hash_map<SequenceId, Sequence> sequences_;
  // New sequences of the step in progress, until Commit moves them into sequences_.
  absl::node_hash_map<SequenceId, Sequence> staged_;
  LogitsObserver logits_observer_;
  FaultInjector fault_injector_;

  // Per-step staging, reused across steps.
  std::vector<Entry> entries_;
  std::vector<LogitRequest> logit_requests_;
  // The step's exported blobs, until Commit moves them into the plan's outputs.
  std::vector<KvBlob> pending_exports_;
  std::vector<int32_t> token_ids_, positions_, slots_, query_start_, seq_lens_, block_tables_,
      tail_slots_, tail_first_blocks_;
  std::vector<float> rope_cos_, rope_sin_;
  std::vector<float> host_logits_;
  std::vector<int32_t> logit_rows_;
  std::vector<int32_t> host_routes_;
  // The step's inputs in backend memory: one buffer, each part at a fixed byte offset.
  struct StepInputs {
    int32_t max_tokens = 0, max_seqs = 0, max_blocks_per_seq = 0;
    int64_t token_ids = 0, slots = 0, rope_cos = 0, rope_sin = 0, query_start = 0, seq_lens = 0,
            block_tables = 0, tail_slots = 0, tail_first_blocks = 0;
  };
  StepInputs inputs_;
  DeviceBuffer device_inputs_;
  // Batch sizes that decode steps are padded to and replayed as graphs (ascending; empty when
  // the backend has no graphs or they are off).
  std::vector<int32_t> graph_batch_sizes_;
};

}  // namespace loom
