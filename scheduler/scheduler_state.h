// The scheduler's per-request and per-sequence state (private to scheduler/*.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "scheduler/scheduler.h"

namespace loom {

struct Scheduler::Req {
  SchedRequest params;
  uint64_t arrival = 0;
  std::vector<std::unique_ptr<Seq>> seqs;
  int32_t num_finished = 0;
  bool admitted = false;      // choice 0 has run at least once
  bool prompt_ready = false;  // choice 0 has computed the whole prompt once
  // Live migration out in progress: the engine sequence it started from (a preemption changes
  // it, which aborts the migration).
  bool migrating = false;
  SequenceId migrating_from;
};

struct Scheduler::Seq {
  // kFrozen: parked for a migration's last stage (holds its blocks; neither scheduled nor
  // preempted). `frozen_waiting` says where CancelMigrateOut puts it back.
  enum class State { kWaiting, kRunning, kFrozen, kFinished };
  Req* req = nullptr;
  int32_t index = 0;
  State state = State::kWaiting;
  SequenceId id;
  bool known = false;  // the engine holds this incarnation
  std::vector<TokenId> tokens;
  int32_t num_prompt = 0;
  int32_t num_computed = 0;
  std::vector<BlockId> blocks;
  int32_t num_registered = 0;  // leading blocks whose hash chain has been walked
  BlockHash last_hash;
  int32_t num_cached_tokens = 0;
  int64_t first_scheduled_ms = -1;  // kept across preemptions
  // Prompt positions whose log-probabilities were reported (choice 0, prompt_logprobs >= 0);
  // kept across preemptions, so a recomputed prompt reports none twice.
  int32_t num_prompt_logprobs = 0;
  bool frozen_waiting = false;
  // Resumed from a migration: the blob with its residual tail, for its first plan.
  std::shared_ptr<const KvBlob> imported_tail;

  int32_t num_generated() const { return static_cast<int32_t>(tokens.size()) - num_prompt; }
  // Whether this sequence still owes prompt log-probabilities: it must compute its whole prompt
  // (no prefix-cache hit) and ask the engine for them.
  bool ScoresPrompt() const {
    return index == 0 && req->params.sampling.prompt_logprobs >= 0 &&
           num_prompt_logprobs < num_prompt - 1;
  }
  // Most important first: priority, then arrival, then choice.
  auto Key() const { return std::make_tuple(req->params.priority, req->arrival, index); }
  static bool MoreImportant(const Seq* a, const Seq* b) { return a->Key() < b->Key(); }
};

}  // namespace loom
