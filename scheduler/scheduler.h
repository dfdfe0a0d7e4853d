// The continuous-batching scheduler of the server (shared/ARCHITECTURE.md §3, §5).
//
// Pure policy over plain data: it owns the logical KV blocks (BlockPool), the waiting and running
// sequences, and turns them into one StepPlan per step; the engine loop passes the plan to
// Executor::Execute and the result back to Update. Every choice of a request is one sequence.
//
// Step formation, in order:
//   1. Sequences that finished, were aborted or passed their deadline are released (named in the
//      plan's `finished`, blocks freed).
//   2. Running sequences, most important first (priority, then arrival): one decode token, or the
//      next chunk of an unfinished prompt. When their blocks run out, the least important running
//      sequence (lowest priority, latest arrival) is preempted by recompute: its blocks are freed
//      and it waits again, keeping the tokens it generated.
//   3. Waiting sequences, most important first, while the token budget, the sequence cap and the
//      free blocks allow: the longest verified cached prefix is reused, the rest of the prompt is
//      prefilled in chunks. A waiting sequence more important than a running one may preempt it.
// Choices 1..n-1 of a request wait until choice 0 has prefilled its prompt (or has ended), then
// reuse its blocks through the prefix cache (with prefix caching off they prefill on their own,
// unless the prompt's log-probabilities are asked for: those come from choice 0, before any
// choice's first token).
//
// Prompt log-probabilities (sampling.prompt_logprobs >= 0) are computed by choice 0 alone, which
// then takes no prefix-cache hit until all of them are reported; each position is reported once.
// A request with max_new_tokens 0 computes its prompt and finishes with kLength, generating none.
//
// Admission control bounds the waiting queue by requests and by prompt tokens; Add refuses
// beyond it with ResourceExhausted (the server answers 503 with Retry-After).
//
// Mixture-of-experts models whose experts live behind an expert cache
// (KvCapacity::expert_cache_slots > 0): the scheduler runs the expert-cache policy
// (scheduler/experts/expert_cache_driver.h). Every plan asks for the routing
// (report_expert_routing) and carries the policy's prefetch hints and keep-scores; Update feeds
// each request's routing to it, and a request that ends leaves its activation matrix in the
// policy's collection. Without an expert cache (or for a dense model) none of this runs and
// plans carry no expert fields.
//
// Thread safety: none; the engine loop thread owns it. Time comes in as arguments.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/api/model_info.h"
#include "engine/api/step.h"
#include "absl/status/statusor.h"
#include "scheduler/block_pool.h"
#include "scheduler/experts/expert_cache_driver.h"
#include "scheduler/load.h"
#include "scheduler/request.h"

namespace loom {

struct SchedulerConfig {
  // Most tokens computed in one step, most sequences in one step (<= the executor's capacity).
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  // Most prompt tokens one sequence computes per step; 0 = the whole budget.
  int32_t max_prefill_chunk = 0;
  bool enable_prefix_caching = true;
  // Admission bounds on what waits (not yet running); 0 = unbounded.
  int32_t max_waiting_requests = 0;
  int64_t max_waiting_prompt_tokens = 0;
  // The expert-cache policy and its bounds, used only for a mixture-of-experts model with an
  // expert cache (policy: "activation" by default, "lru" or "lfu"). The executor sets the cache
  // size (KvCapacity::expert_cache_slots). A policy Create refuses is a start-up bug: callers
  // validate the name first (ExpertCachePolicy::Names()).
  ExpertCacheDriverConfig expert_cache;
};

// A snapshot for metrics.
struct SchedulerStats {
  int32_t num_running_requests = 0;
  int32_t num_waiting_requests = 0;
  int32_t num_blocks = 0;
  int32_t num_free_blocks = 0;
  int32_t num_cached_blocks = 0;
  int64_t prefix_cache_queried_tokens = 0;  // cumulative
  int64_t prefix_cache_hit_tokens = 0;      // cumulative
  int64_t num_preemptions = 0;              // cumulative
  int64_t num_waiting_prompt_tokens = 0;    // prompt tokens of waiting requests (admission)
  int32_t num_migrating_out = 0;            // requests frozen for a migration's last stage
  int32_t num_reserved_blocks = 0;          // held for incoming migrations
  // The engine's expert cache counters as of the latest step that reported them (slots > 0);
  // all zero for a dense model or without an expert cache.
  ExpertCacheCounters expert_cache;
};

// Live migration (shared/ARCHITECTURE.md §6): what the destination needs to resume a request.
struct MigrantState {
  SchedRequest params;  // n == 1
  // The prompt followed by every generated token (all of them already reported to the client).
  std::vector<TokenId> tokens;
  // Leading tokens whose K/V the migrated blocks hold; the destination computes the rest.
  int32_t num_computed = 0;
  int32_t num_cached_tokens = 0;
};

// A pre-copy or last stage of a migration out: the export added to the next plan. Its blob is
// filled once that step has run.
struct MigrationExport {
  std::shared_ptr<KvBlob> blob;
  int32_t first_block = 0;
  int32_t num_blocks = 0;
  // Blocks the destination needs in all (so far): full computed blocks for a pre-copy stage,
  // every computed block for the last one.
  int32_t total_blocks = 0;
  // Last stage only: the request as it is frozen.
  MigrantState state;
  // The engine sequence at the start of the migration; a preemption changes it.
  SequenceId seq_id;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, const ModelInfo& model, const KvCapacity& capacity);
  ~Scheduler();

  // Queues a request. InvalidArgument for an empty prompt, n < 1, max_new_tokens < 0, a prompt
  // plus max_new_tokens past the context, a duplicate id, or a KV demand larger than the whole
  // cache; ResourceExhausted when the waiting queue is full.
  absl::Status Add(SchedRequest request);

  // Finishes a request with kAbort at the next Schedule; unknown ids are ignored.
  void Abort(RequestId id);
  // Finishes one choice of a request with kAbort at the next Schedule (the server ended it, e.g.
  // on a stop string); the other choices go on. Unknown ids and indexes are ignored.
  void AbortChoice(RequestId id, int32_t index);

  // Forms the next step at time `now_ms`. Finishes of aborted and expired requests are reported
  // by TakeOutputs. The plan may be empty (nothing to do).
  StepPlan Schedule(int64_t now_ms);

  // KV transfers are waiting (ImportForMigration, ExportForMigration).
  bool HasTransfers() const { return !pending_exports_.empty() || !pending_imports_.empty(); }
  // A plan of only the waiting KV transfers (no sequence computes), so that a migration's copy
  // waits for no forward pass; Update takes its (empty) result like any other.
  StepPlan ScheduleTransfers();

  // Applies the executor's result for the plan Schedule returned last. InternalError, with
  // nothing applied, when the result is not that plan's (another step_id, other sequences): the
  // caller then abandons the step (AbandonStep with engine_applied_plan = true).
  absl::Status Update(const StepResult& result);

  // Gives up on the step Schedule returned last (Executor::Execute's outcomes). Every sequence
  // in it releases its blocks and leaves the step. `engine_applied_plan` is false when Execute
  // left the engine unchanged (the plan's releases are repeated in the next plan and its new
  // sequences are unknown to the engine), true when the engine applied it (a failure marked
  // with MarkStepApplied, or a result Update rejected): the releases are done and the engine
  // drops the step's sequences when the next plan names them in `finished`. The plan is never
  // sent again. The sequences in `touched` (every sequence of the step when it is null) end:
  // the ids of their requests are returned for the caller to fail and Abort. The step's other
  // sequences wait again and recompute.
  std::vector<RequestId> AbandonStep(bool engine_applied_plan,
                                     const std::vector<SequenceId>* touched = nullptr);

  // Everything produced since the last call: new tokens and finishes, one entry per choice
  // that has something to report.
  std::vector<ChoiceOutput> TakeOutputs();

  bool HasWork() const;
  // Whether request `id` is here (not finished).
  bool Contains(RequestId id) const { return requests_.contains(id); }
  SchedulerStats Stats() const;
  const BlockPool& block_pool() const { return pool_; }

  // ---- Cluster ----------------------------------------------------------------------------
  // The load report of scheduler/load.h from the current state (`high_priority_below`: priority
  // values below it are high priority).
  LoadReport Load(bool draining, int32_t high_priority_below,
                  double priority_headroom_fraction) const;
  // The running request in its decode phase (n == 1, not migrating) holding the fewest blocks
  // (the cheapest to move; Llumnix's default) or, with `longest`, the most; its id and blocks.
  // nullopt when none can move. For the migration policy.
  std::optional<std::pair<RequestId, int32_t>> ShortestMovableRequest(bool longest = false) const;
  // Ids of every request that could move (n == 1, not scoring its prompt, not migrating).
  std::vector<RequestId> MovableRequests() const;

  // Migration out (source). A request can move when it has one choice, is not reporting prompt
  // log-probabilities and is not already migrating; it may be running (decode or prefill) or
  // waiting (its state moves without KV). Begin marks it; the stages then export:
  //   ExportForMigration(id, first_block, /*freeze=*/false): the request keeps running; exports
  //     its full, computed blocks from first_block (they no longer change).
  //   ExportForMigration(id, first_block, /*freeze=*/true): freezes it (it leaves the batch, can
  //     be neither scheduled nor preempted) and exports every remaining computed block and its
  //     residual tail; the returned state is what the destination resumes.
  // Errors: NotFound (finished, or unknown), Aborted (preempted since Begin: restart it), or
  // FailedPrecondition (cannot move). CommitMigrateOut ends a frozen request here without an
  // output (the destination owns it now); CancelMigrateOut puts it back where it was (running
  // with its blocks, or waiting). An aborted or expired frozen request finishes as usual.
  absl::Status BeginMigrateOut(RequestId id);
  // `max_blocks` > 0 caps what one pre-copy export takes (the caller's buffer); the last stage
  // always takes everything.
  absl::StatusOr<MigrationExport> ExportForMigration(RequestId id, int32_t first_block,
                                                     bool freeze, int32_t max_blocks = 0);
  void CommitMigrateOut(RequestId id);
  void CancelMigrateOut(RequestId id);

  // Migration in (destination). Reserve holds `num_blocks` more free blocks under a reservation
  // (0 = a new one); ResourceExhausted when they are not free (taking them would evict cached
  // blocks, which is fine) or the reservation is unknown. Every call refreshes the reservation's
  // clock; ExpireReservations frees those idle since `older_than_ms`.
  absl::StatusOr<uint64_t> Reserve(uint64_t reservation, int32_t num_blocks, int64_t now_ms);
  int32_t ReservedBlocks(uint64_t reservation) const;
  // Writes `blob` into reserved blocks [first_block, first_block + blob->num_blocks) in the
  // next plan.
  absl::Status ImportForMigration(uint64_t reservation, int32_t first_block,
                                  std::shared_ptr<const KvBlob> blob, int64_t now_ms);
  void ReleaseReservation(uint64_t reservation);
  void ExpireReservations(int64_t older_than_ms);
  // Installs a migrated request under `id` with the reservation's blocks (none for a request
  // that moves without KV): it runs from the next step, computing from state.num_computed.
  // `tail` is the exported blob carrying a low-bit format's residual tail (may be null).
  // `last_blocks` (may be null) holds the reservation's blocks from `last_first_block` on that
  // were not pushed yet: they are imported in the transfer step that precedes the sequence's first
  // step here, exactly as ImportForMigration would have. InvalidArgument for a state that does not
  // fit (context, blocks), ResourceExhausted when the sequence cap is reached; nothing is imported
  // then.
  absl::Status ResumeMigrated(RequestId id, uint64_t reservation, const MigrantState& state,
                              std::shared_ptr<const KvBlob> tail,
                              std::shared_ptr<const KvBlob> last_blocks = nullptr,
                              int32_t last_first_block = 0);

  // The expert-cache policy the scheduler runs, or null (a dense model, or no expert cache).
  const ExpertCacheDriver* expert_cache_driver() const { return experts_.get(); }

  // Full consistency check for tests: block ownership matches reference counts, every running
  // sequence's blocks cover its computed tokens, no block is owned twice by one sequence.
  absl::Status CheckInvariants() const;

 private:
  struct Seq;
  struct Req;

  Seq* NewSeq(Req& req, int32_t index);
  void ScheduleRunning(Seq& seq, int32_t* budget, StepPlan& plan);
  void ScheduleWaiting(int32_t* budget, StepPlan& plan);
  void MakeRoomForImportantWaiting();
  int32_t PrefillChunk(const Seq& seq, int32_t budget) const;
  bool EnsureBlocks(Seq& seq, int32_t num_tokens, std::vector<BlockId>* added);
  Seq* LeastImportantRunning() const;
  void Requeue(Seq& seq);
  void Preempt(Seq& seq);
  void Finish(Seq& seq, FinishReason reason);
  void Release(Seq& seq);
  void RegisterFullBlocks(Seq& seq);
  void AppendToken(Seq& seq, const SequenceOutput& out);
  void TakePromptLogprobs(Seq& seq, const SequenceOutput& out);
  void ExpireAndAbort(int64_t now_ms);
  ChoiceOutput& OutputFor(Seq& seq);
  void InsertWaiting(Seq* seq);
  void MarkAdmitted(Req& req);
  bool Eligible(const Seq& seq) const;
  void InsertRunning(Seq* seq);
  Seq* MovableSeq(RequestId id, absl::Status* why);
  // Expert cache (scheduler_experts.cc): the plan's expert fields; one sequence's routing; a
  // request that ends.
  void PlanExperts(StepPlan& plan);
  void RecordRouting(const Seq& seq, const SequenceOutput& out);
  void EndRequestExperts(RequestId id);
  template <typename List>
  static void Erase(List& list, const Seq* seq) {
    list.erase(std::remove(list.begin(), list.end(), seq), list.end());
  }

  SchedulerConfig config_;
  ModelInfo model_;
  BlockPool pool_;
  uint64_t next_seq_id_ = 1;
  uint64_t next_arrival_ = 0;
  uint64_t next_step_id_ = 1;
  uint64_t in_flight_step_id_ = 0;  // of the plan Schedule returned last
  absl::flat_hash_map<RequestId, std::unique_ptr<Req>> requests_;
  std::vector<Seq*> running_;  // most important first
  std::deque<Seq*> waiting_;   // most important first
  std::vector<RequestId> aborts_;
  std::vector<std::pair<RequestId, int32_t>> choice_aborts_;
  std::vector<SequenceId> released_;  // engine sequences to drop in the next plan
  // Sequences in the last plan, in plan order (new first), with the tokens each computes.
  std::vector<std::pair<Seq*, int32_t>> in_flight_;
  std::vector<std::pair<Seq*, int32_t>> new_in_flight_;
  // Of the last plan: how many of in_flight_ were new to the engine, and what it released.
  // A refused plan leaves the engine unchanged, so AbandonStep needs both.
  size_t num_new_in_flight_ = 0;
  std::vector<SequenceId> last_finished_;
  absl::flat_hash_map<std::pair<uint64_t, int32_t>, ChoiceOutput> outputs_;
  std::vector<std::pair<uint64_t, int32_t>> output_order_;
  // Requests whose first choice has not run yet, and their prompt tokens (admission control).
  int32_t waiting_requests_ = 0;
  int64_t waiting_prompt_tokens_ = 0;
  int64_t queried_tokens_ = 0;
  int64_t hit_tokens_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t now_ms_ = 0;  // of the Schedule call in progress
  // Cluster: frozen sequences (a migration's last stage), transfers for the next plan, and
  // blocks reserved for incoming migrations.
  std::vector<Seq*> frozen_;
  std::vector<KvExport> pending_exports_;
  std::vector<KvImport> pending_imports_;
  struct Reservation {
    std::vector<BlockId> blocks;
    int64_t last_used_ms = 0;
  };
  absl::flat_hash_map<uint64_t, Reservation> reservations_;
  uint64_t next_reservation_ = 1;
  // Expert cache: the policy (null without one), the requests of the plan being formed (reused
  // from step to step), the engine's latest counters, and whether a bad routing record was
  // already logged (once is enough).
  std::unique_ptr<ExpertCacheDriver> experts_;
  std::vector<RequestId> expert_requests_;
  ExpertCacheCounters expert_cache_counters_;
  bool logged_bad_routing_ = false;
};

}  // namespace loom
