// Scheduler: step formation (Schedule), result application (Update) and release paths.
#include <algorithm>

#include "engine/common/logging.h"
#include "engine/common/strings.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_state.h"

namespace loom {

StepPlan Scheduler::Schedule(int64_t now_ms) {
  LOOM_CHECK(in_flight_.empty(), "Schedule called twice without Update");
  now_ms_ = now_ms;
  ExpireAndAbort(now_ms);
  StepPlan plan;
  plan.step_id = next_step_id_++;
  in_flight_step_id_ = plan.step_id;
  int32_t budget = config_.max_num_batched_tokens;
  MakeRoomForImportantWaiting();
  const int64_t preemptions_before = num_preemptions_;
  // Copy: preemption removes sequences from running_ while we walk it.
  const std::vector<Seq*> running = running_;
  for (Seq* seq : running) {
    if (budget == 0) break;
    if (seq->state != Seq::State::kRunning) continue;  // preempted by a more important one
    ScheduleRunning(*seq, &budget, plan);
  }
  // A step that had to preempt admits nobody: the freed blocks go to the running sequences.
  if (num_preemptions_ == preemptions_before) ScheduleWaiting(&budget, plan);
  plan.finished = std::move(released_);
  released_.clear();
  // An export of a sequence this plan releases is dropped: its blob stays empty (no layout),
  // and the migration that asked for it sees the sequence gone at its next stage.
  for (KvExport& e : pending_exports_) {
    if (e.tail_of.value() != 0 &&
        std::find(plan.finished.begin(), plan.finished.end(), e.tail_of) != plan.finished.end()) {
      continue;
    }
    plan.kv_exports.push_back(std::move(e));
  }
  pending_exports_.clear();
  plan.kv_imports = std::move(pending_imports_);
  pending_imports_.clear();
  last_finished_ = plan.finished;
  num_new_in_flight_ = new_in_flight_.size();
  // The result lists new sequences first, then continuing ones, in plan order.
  in_flight_.insert(in_flight_.begin(), new_in_flight_.begin(), new_in_flight_.end());
  new_in_flight_.clear();
  if (experts_ != nullptr) PlanExperts(plan);
  return plan;
}

StepPlan Scheduler::ScheduleTransfers() {
  LOOM_CHECK(in_flight_.empty(), "ScheduleTransfers called with a step in flight");
  StepPlan plan;
  plan.step_id = next_step_id_++;
  in_flight_step_id_ = plan.step_id;
  last_finished_.clear();
  num_new_in_flight_ = 0;
  // Exports of sequences waiting to be released wait for the next full plan (which drops them).
  std::vector<KvExport> later;
  for (KvExport& e : pending_exports_) {
    if (e.tail_of.value() != 0 &&
        std::find(released_.begin(), released_.end(), e.tail_of) != released_.end()) {
      later.push_back(std::move(e));
    } else {
      plan.kv_exports.push_back(std::move(e));
    }
  }
  pending_exports_ = std::move(later);
  plan.kv_imports = std::move(pending_imports_);
  pending_imports_.clear();
  plan.report_expert_routing = experts_ != nullptr;  // nothing computes, so nothing is routed
  return plan;
}

int32_t Scheduler::PrefillChunk(const Seq& seq, int32_t budget) const {
  int32_t remaining = static_cast<int32_t>(seq.tokens.size()) - seq.num_computed;
  if (config_.max_prefill_chunk > 0) remaining = std::min(remaining, config_.max_prefill_chunk);
  return std::min(remaining, budget);
}

void Scheduler::ScheduleRunning(Seq& seq, int32_t* budget, StepPlan& plan) {
  const int32_t num_new = PrefillChunk(seq, *budget);
  if (num_new <= 0) return;
  std::vector<BlockId> added;
  while (!EnsureBlocks(seq, seq.num_computed + num_new, &added)) {
    // Running sequences are scheduled most important first, so the least important one has not
    // been scheduled in this step yet (or is `seq` itself).
    Seq* victim = LeastImportantRunning();
    Preempt(*victim);
    if (victim == &seq) return;
  }
  if (!seq.known) {
    // Resumed from a migration: the engine meets it now, with its imported blocks.
    seq.id = SequenceId(next_seq_id_++);
    seq.known = true;
    if (seq.first_scheduled_ms < 0) seq.first_scheduled_ms = now_ms_;
    NewSequencePlan p;
    p.seq_id = seq.id;
    p.token_ids = seq.tokens;
    p.num_prompt_tokens = seq.num_prompt;
    p.block_table = seq.blocks;
    p.num_computed_tokens = seq.num_computed;
    p.num_scheduled_tokens = num_new;
    p.sampling = seq.req->params.sampling;
    p.sampling.prompt_logprobs = -1;
    p.imported_tail = std::move(seq.imported_tail);
    seq.imported_tail = nullptr;
    plan.new_sequences.push_back(std::move(p));
    new_in_flight_.emplace_back(&seq, num_new);
    *budget -= num_new;
    return;
  }
  plan.continuing.push_back(ContinuingSequencePlan{seq.id, std::move(added), num_new});
  in_flight_.emplace_back(&seq, num_new);
  *budget -= num_new;
}

bool Scheduler::EnsureBlocks(Seq& seq, int32_t num_tokens, std::vector<BlockId>* added) {
  const int32_t bs = pool_.block_size();
  const int32_t need = (num_tokens + bs - 1) / bs - static_cast<int32_t>(seq.blocks.size());
  if (need <= 0) return true;
  const size_t before = added->size();
  if (!pool_.Allocate(need, added)) return false;
  seq.blocks.insert(seq.blocks.end(), added->begin() + static_cast<ptrdiff_t>(before),
                    added->end());
  return true;
}

// Priority preemption: while the most important eligible waiting sequence is more important than
// the least important running one and cannot start (no sequence slot, or too few free blocks for
// its first chunk), the running one is preempted.
void Scheduler::MakeRoomForImportantWaiting() {
  auto head = std::find_if(waiting_.begin(), waiting_.end(),
                           [&](const Seq* s) { return Eligible(*s); });
  if (head == waiting_.end()) return;
  const Seq& seq = **head;
  const int32_t bs = pool_.block_size();
  const int32_t first_chunk = PrefillChunk(seq, config_.max_num_batched_tokens);
  const int32_t need = (first_chunk + bs - 1) / bs;
  while (static_cast<int32_t>(running_.size()) >= config_.max_num_seqs ||
         pool_.num_free() < need) {
    Seq* victim = LeastImportantRunning();
    if (victim == nullptr || !(seq.Key() < victim->Key())) return;
    Preempt(*victim);
  }
}

// Choices after the first wait for the first to compute the prompt, so they find it cached
// (unless the first ended before that, e.g. aborted: then nobody is waited for).
// With prefix caching off they need not wait, unless choice 0 reports the prompt's
// log-probabilities: those must all be out before any choice's first token.
bool Scheduler::Eligible(const Seq& seq) const {
  const bool waits_for_first =
      pool_.prefix_caching() || seq.req->params.sampling.prompt_logprobs >= 0;
  return seq.index == 0 || seq.req->prompt_ready || !waits_for_first ||
         seq.req->seqs.front()->state == Seq::State::kFinished;
}

void Scheduler::ScheduleWaiting(int32_t* budget, StepPlan& plan) {
  const int32_t bs = pool_.block_size();
  for (size_t w = 0; w < waiting_.size() && *budget > 0;) {
    if (static_cast<int32_t>(running_.size()) >= config_.max_num_seqs) return;
    Seq& seq = *waiting_[w];
    if (!Eligible(seq)) {
      ++w;
      continue;
    }
    const int32_t len = static_cast<int32_t>(seq.tokens.size());
    // A sequence that owes prompt log-probabilities computes every prompt position.
    const bool scores_prompt = seq.ScoresPrompt();
    std::vector<BlockId> hit;
    if (pool_.prefix_caching() && !scores_prompt) {
      // At least the last token is computed, so it never writes into a shared block.
      std::vector<BlockHash> hashes = HashFullBlocks(
          std::span<const TokenId>(seq.tokens).first(len - 1), bs, seq.req->params.cache_salt);
      hit = pool_.FindCachedPrefix(seq.tokens, hashes, seq.req->params.cache_salt);
    }
    const int32_t num_cached = static_cast<int32_t>(hit.size()) * bs;
    seq.num_computed = num_cached;
    const int32_t num_new = PrefillChunk(seq, *budget);
    int32_t free_hits = 0;
    for (BlockId b : hit) free_hits += pool_.ref_count(b) == 0 ? 1 : 0;
    const int32_t need = (num_cached + num_new + bs - 1) / bs - static_cast<int32_t>(hit.size());
    if (need > pool_.num_free() - free_hits) {
      seq.num_computed = 0;
      return;  // head-of-line: later (less important) sequences wait too
    }
    pool_.Acquire(hit);
    seq.blocks = std::move(hit);
    LOOM_CHECK(pool_.Allocate(need, &seq.blocks), "allocation after a successful check failed");
    queried_tokens_ += len;
    hit_tokens_ += num_cached;
    seq.num_cached_tokens = num_cached;
    if (seq.first_scheduled_ms < 0) seq.first_scheduled_ms = now_ms_;
    seq.id = SequenceId(next_seq_id_++);
    seq.known = true;
    waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(w));
    InsertRunning(&seq);
    if (seq.index == 0) MarkAdmitted(*seq.req);
    NewSequencePlan p;
    p.seq_id = seq.id;
    p.token_ids = seq.tokens;
    p.num_prompt_tokens = seq.num_prompt;
    p.block_table = seq.blocks;
    p.num_computed_tokens = num_cached;
    p.num_scheduled_tokens = num_new;
    p.sampling = seq.req->params.sampling;
    p.sampling.seed += static_cast<uint64_t>(seq.index);
    if (!scores_prompt) p.sampling.prompt_logprobs = -1;
    plan.new_sequences.push_back(std::move(p));
    new_in_flight_.emplace_back(&seq, num_new);
    *budget -= num_new;
  }
}

void Scheduler::MarkAdmitted(Req& req) {
  if (req.admitted) return;
  req.admitted = true;
  --waiting_requests_;
  waiting_prompt_tokens_ -= static_cast<int64_t>(req.params.prompt.size());
}

void Scheduler::InsertRunning(Seq* seq) {
  seq->state = Seq::State::kRunning;
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, Seq::MoreImportant),
                  seq);
}

Scheduler::Seq* Scheduler::LeastImportantRunning() const {
  return running_.empty() ? nullptr : running_.back();
}

void Scheduler::Release(Seq& seq) {
  if (seq.known) released_.push_back(seq.id);
  seq.known = false;
  seq.imported_tail = nullptr;
  // Last block first: the tail of a prefix is evicted before its head.
  pool_.Release(std::vector<BlockId>(seq.blocks.rbegin(), seq.blocks.rend()));
  seq.blocks.clear();
  seq.num_computed = 0;
  seq.num_registered = 0;
  seq.last_hash = RootBlockHash(seq.req->params.cache_salt);
}

// A running sequence gives its blocks back and waits again (it keeps its tokens).
void Scheduler::Requeue(Seq& seq) {
  LOOM_CHECK(seq.state == Seq::State::kRunning, "requeueing a sequence that is not running");
  Release(seq);
  Erase(running_, &seq);
  InsertWaiting(&seq);
}

void Scheduler::Preempt(Seq& seq) {
  Requeue(seq);
  ++num_preemptions_;
}

ChoiceOutput& Scheduler::OutputFor(Seq& seq) {
  const auto key = std::make_pair(seq.req->params.id.value(), seq.index);
  auto [it, inserted] = outputs_.try_emplace(key);
  if (inserted) {
    output_order_.push_back(key);
    it->second.request_id = seq.req->params.id;
    it->second.index = seq.index;
  }
  it->second.num_prompt_tokens = seq.num_prompt;
  it->second.num_cached_tokens = seq.num_cached_tokens;
  it->second.first_scheduled_ms = seq.first_scheduled_ms;
  return it->second;
}

void Scheduler::Finish(Seq& seq, FinishReason reason) {
  if (seq.state == Seq::State::kFinished) return;
  if (seq.state == Seq::State::kRunning) {
    Release(seq);
    Erase(running_, &seq);
  } else if (seq.state == Seq::State::kFrozen) {
    Release(seq);
    Erase(frozen_, &seq);
  } else {
    Erase(waiting_, &seq);
  }
  seq.state = Seq::State::kFinished;
  OutputFor(seq).finish = reason;
  Req& req = *seq.req;
  if (++req.num_finished < req.params.n) return;
  MarkAdmitted(req);  // a request that never ran leaves the waiting counts too
  EndRequestExperts(req.params.id);
  requests_.erase(req.params.id);  // destroys req and its sequences
}

void Scheduler::ExpireAndAbort(int64_t now_ms) {
  std::vector<std::pair<RequestId, FinishReason>> ends;
  for (RequestId id : aborts_) ends.emplace_back(id, FinishReason::kAbort);
  aborts_.clear();
  for (const auto& [id, req] : requests_) {
    // A frozen request's deadline travels with it (its move either commits or unfreezes it).
    if (req->params.deadline_ms > 0 && now_ms >= req->params.deadline_ms &&
        req->seqs.front()->state != Seq::State::kFrozen) {
      ends.emplace_back(id, FinishReason::kDeadline);
    }
  }
  for (const auto& [id, index] : choice_aborts_) {
    auto it = requests_.find(id);
    if (it == requests_.end() || index < 0 || index >= static_cast<int32_t>(it->second->seqs.size())) {
      continue;
    }
    Finish(*it->second->seqs[index], FinishReason::kAbort);  // may erase the request
  }
  choice_aborts_.clear();
  for (const auto& [id, reason] : ends) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    std::vector<Seq*> seqs;
    for (auto& s : it->second->seqs) seqs.push_back(s.get());
    for (Seq* s : seqs) Finish(*s, reason);  // the last Finish erases the request
  }
}

}  // namespace loom
