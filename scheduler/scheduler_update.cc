// Scheduler: applying a step's result, reporting outputs, stats and invariants.
#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_state.h"

namespace loom {

absl::Status Scheduler::Update(const StepResult& result) {
  if (result.step_id != in_flight_step_id_) {
    return absl::InternalError(StrCat("step result is for step ", result.step_id,
                                      "; the plan was step ", in_flight_step_id_));
  }
  if (result.outputs.size() != in_flight_.size()) {
    // Nothing in this result can be trusted; the caller abandons the step (AbandonStep).
    return absl::InternalError(StrCat("step result has ", result.outputs.size(),
                                      " outputs for ", in_flight_.size(),
                                      " scheduled sequences"));
  }
  if (result.expert_cache.slots > 0) expert_cache_counters_ = result.expert_cache;
  const std::vector<std::pair<Seq*, int32_t>> step = std::move(in_flight_);
  in_flight_.clear();
  for (size_t i = 0; i < step.size(); ++i) {
    Seq& seq = *step[i].first;
    const SequenceOutput& out = result.outputs[i];
    if (out.seq_id != seq.id) {
      in_flight_.assign(step.begin() + static_cast<ptrdiff_t>(i), step.end());
      return absl::InternalError(StrCat("step output ", i, " is for sequence ", out.seq_id,
                                        "; the plan had ", seq.id));
    }
    if (experts_ != nullptr) RecordRouting(seq, out);
    seq.num_computed += step[i].second;
    RegisterFullBlocks(seq);
    if (seq.index == 0 && seq.num_computed >= seq.num_prompt) seq.req->prompt_ready = true;
    if (!out.prompt_logprobs.empty()) TakePromptLogprobs(seq, out);
    if (!out.has_token()) continue;
    if (seq.req->params.max_new_tokens == 0) {
      Finish(seq, FinishReason::kLength);  // the prompt was all it asked for; may destroy seq
    } else {
      AppendToken(seq, out);  // may finish and destroy the sequence
    }
  }
  if (experts_ != nullptr) experts_->EndStep();
  return absl::OkStatus();
}

std::vector<RequestId> Scheduler::AbandonStep(bool engine_applied_plan,
                                              const std::vector<SequenceId>* touched) {
  std::vector<RequestId> ids;
  if (!engine_applied_plan) {
    // A refused plan left the engine unchanged: what it was to release is still there, and the
    // sequences new in it are unknown to it.
    released_.insert(released_.end(), last_finished_.begin(), last_finished_.end());
    for (size_t i = 0; i < num_new_in_flight_ && i < in_flight_.size(); ++i) {
      in_flight_[i].first->known = false;
    }
  }
  last_finished_.clear();
  for (size_t i = 0; i < in_flight_.size(); ++i) {
    Seq* seq = in_flight_[i].first;
    const bool ends = touched == nullptr ||
                      std::find(touched->begin(), touched->end(), seq->id) != touched->end();
    if (ends && std::find(ids.begin(), ids.end(), seq->req->params.id) == ids.end()) {
      ids.push_back(seq->req->params.id);
    }
    // Released (named in the next plan's `finished` when the engine holds it) and waiting.
    if (seq->state == Seq::State::kRunning) Requeue(*seq);
  }
  in_flight_.clear();
  return ids;
}

void Scheduler::RegisterFullBlocks(Seq& seq) {
  const int32_t bs = pool_.block_size();
  const std::span<const TokenId> tokens(seq.tokens);
  while ((seq.num_registered + 1) * bs <= seq.num_computed) {
    const int32_t i = seq.num_registered;
    const std::span<const TokenId> block = tokens.subspan(static_cast<size_t>(i) * bs, bs);
    seq.last_hash = ChainBlockHash(seq.last_hash, block);
    pool_.Register(seq.blocks[i], seq.last_hash, block, i == 0 ? nullptr : &seq.blocks[i - 1],
                   seq.req->params.cache_salt);
    ++seq.num_registered;
  }
}

void Scheduler::AppendToken(Seq& seq, const SequenceOutput& out) {
  seq.tokens.push_back(out.token_id);
  ChoiceOutput& report = OutputFor(seq);
  report.new_tokens.push_back(out.token_id);
  report.logprobs.insert(report.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
  const SchedRequest& params = seq.req->params;
  FinishReason reason = FinishReason::kNone;
  if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), out.token_id) !=
      params.stop_token_ids.end()) {
    reason = FinishReason::kStop;
  } else if (seq.num_generated() >= params.max_new_tokens ||
             static_cast<int32_t>(seq.tokens.size()) >= model_.max_context_len) {
    reason = FinishReason::kLength;
  }
  if (reason != FinishReason::kNone) Finish(seq, reason);
}

// A preempted sequence recomputes its prompt from the start: positions already reported are
// skipped, so each is reported exactly once and in order.
void Scheduler::TakePromptLogprobs(Seq& seq, const SequenceOutput& out) {
  if (seq.index != 0 || seq.req->params.sampling.prompt_logprobs < 0) return;
  ChoiceOutput* report = nullptr;
  for (size_t i = 0; i < out.prompt_logprobs.size(); ++i) {
    const int32_t position = out.prompt_logprobs_start + static_cast<int32_t>(i);
    if (position != seq.num_prompt_logprobs || position >= seq.num_prompt - 1) continue;
    if (report == nullptr) report = &OutputFor(seq);
    report->prompt_logprobs.push_back(out.prompt_logprobs[i]);
    ++seq.num_prompt_logprobs;
  }
}

std::vector<ChoiceOutput> Scheduler::TakeOutputs() {
  std::vector<ChoiceOutput> outs;
  outs.reserve(output_order_.size());
  for (const auto& key : output_order_) outs.push_back(std::move(outputs_[key]));
  outputs_.clear();
  output_order_.clear();
  return outs;
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats s;
  for (const auto& [id, req] : requests_) {
    if (req->admitted) ++s.num_running_requests;
  }
  s.num_waiting_requests = waiting_requests_;
  s.num_blocks = pool_.num_blocks();
  s.num_free_blocks = pool_.num_free();
  s.num_cached_blocks = pool_.num_cached();
  s.prefix_cache_queried_tokens = queried_tokens_;
  s.prefix_cache_hit_tokens = hit_tokens_;
  s.num_preemptions = num_preemptions_;
  s.num_waiting_prompt_tokens = waiting_prompt_tokens_;
  s.num_migrating_out = static_cast<int32_t>(frozen_.size());
  for (const auto& [id, r] : reservations_) {
    s.num_reserved_blocks += static_cast<int32_t>(r.blocks.size());
  }
  s.expert_cache = expert_cache_counters_;
  return s;
}

absl::Status Scheduler::CheckInvariants() const {
  LOOM_RETURN_IF_ERROR(pool_.CheckInvariants());
  std::vector<int32_t> owners(pool_.num_blocks(), 0);
  const int32_t bs = pool_.block_size();
  std::vector<const Seq*> holders(running_.begin(), running_.end());
  holders.insert(holders.end(), frozen_.begin(), frozen_.end());
  for (const auto& [id, r] : reservations_) {
    for (BlockId b : r.blocks) ++owners[b.value()];
  }
  for (const Seq* seq : holders) {
    absl::flat_hash_set<int32_t> own;
    for (BlockId b : seq->blocks) {
      if (!own.insert(b.value()).second) {
        return absl::InternalError(StrCat("sequence ", seq->id, " holds block ", b, " twice"));
      }
      ++owners[b.value()];
    }
    if (static_cast<int64_t>(seq->blocks.size()) * bs < seq->num_computed) {
      return absl::InternalError(StrCat("sequence ", seq->id, " computed ", seq->num_computed,
                                        " tokens in ", seq->blocks.size(), " blocks"));
    }
  }
  for (const Seq* seq : waiting_) {
    if (!seq->blocks.empty() || seq->known) {
      return absl::InternalError(StrCat("waiting sequence of request ", seq->req->params.id,
                                        " still holds engine state or blocks"));
    }
  }
  for (int32_t b = 0; b < pool_.num_blocks(); ++b) {
    if (owners[b] != pool_.ref_count(BlockId(b))) {
      return absl::InternalError(StrCat("block ", b, " has ", pool_.ref_count(BlockId(b)),
                                        " references but ", owners[b], " owners"));
    }
  }
  if (static_cast<int32_t>(running_.size()) > config_.max_num_seqs) {
    return absl::InternalError(StrCat(running_.size(), " running sequences exceed the cap of ",
                                      config_.max_num_seqs));
  }
  return absl::OkStatus();
}

}  // namespace loom
