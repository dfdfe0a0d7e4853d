#include "scheduler/offline_batch.h"

#include <algorithm>
#include <chrono>

#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

struct Running {
  size_t request = 0;
  SequenceId seq_id;
  int32_t num_tokens = 0;     // prompt + generated so far
  int32_t num_computed = 0;   // tokens whose K/V are cached
  std::vector<BlockId> blocks;
  bool started = false;       // the executor knows it
  bool done = false;
};

class OfflineRunner {
 public:
  OfflineRunner(Executor& executor, std::span<const OfflineRequest> requests,
                const OfflineOptions& options, OfflineStats* stats)
      : executor_(executor), requests_(requests), options_(options), stats_(stats) {
    const KvCapacity& cap = executor.capacity();
    for (int32_t b = cap.num_blocks - 1; b >= 0; --b) free_blocks_.push_back(BlockId(b));
    budget_ = options.max_num_batched_tokens > 0
                  ? std::min(options.max_num_batched_tokens, cap.max_num_batched_tokens)
                  : cap.max_num_batched_tokens;
    results_.resize(requests.size());
    if (stats_ != nullptr) stats_->first_token_ms.assign(requests.size(), -1.0);
  }

  absl::StatusOr<std::vector<OfflineResult>> Run();

 private:
  // KV blocks a request needs for its prompt plus max_new_tokens.
  int64_t BlocksFor(const OfflineRequest& r) const {
    const int64_t bs = executor_.capacity().block_size;
    return (static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens + bs - 1) / bs;
  }
  absl::Status CheckRequests() const;
  absl::Status Steps();
  void Admit(int64_t step);
  StepPlan Plan(int64_t step);
  absl::Status Absorb(const StepResult& result, double elapsed_ms, bool had_prefill);
  void ReleaseAfterFailure(const StepPlan& refused);

  Executor& executor_;
  std::span<const OfflineRequest> requests_;
  OfflineOptions options_;
  OfflineStats* stats_;
  std::vector<BlockId> free_blocks_;
  int32_t budget_ = 0;
  size_t next_request_ = 0;
  std::vector<Running> running_;
  std::vector<OfflineResult> results_;
  std::vector<SequenceId> finished_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Everything that would stop a request later is checked before the first step, so a refused
// batch leaves the executor untouched.
absl::Status OfflineRunner::CheckRequests() const {
  const KvCapacity& cap = executor_.capacity();
  if (cap.block_size < 1 || cap.max_num_seqs < 1 || budget_ < 1) {
    return absl::InvalidArgumentError(
        StrCat("executor capacity: block_size (", cap.block_size, "), max_num_seqs (",
               cap.max_num_seqs, ") and the step token budget (", budget_,
               ") must be positive"));
  }
  const ModelInfo& info = executor_.model_info();
  for (size_t i = 0; i < requests_.size(); ++i) {
    const OfflineRequest& r = requests_[i];
    if (r.prompt.empty()) {
      return absl::InvalidArgumentError(StrCat("request ", i, " has an empty prompt"));
    }
    if (r.max_new_tokens < 1) {
      return absl::InvalidArgumentError(
          StrCat("request ", i, " has max_new_tokens ", r.max_new_tokens, " (must be >= 1)"));
    }
    for (TokenId token : r.prompt) {
      if (token.value() < 0 || token.value() >= info.vocab_size) {
        return absl::InvalidArgumentError(StrCat("request ", i, " has token ", token,
                                                 " outside the vocabulary [0, ", info.vocab_size,
                                                 ")"));
      }
    }
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
    if (total > info.max_context_len) {
      return absl::InvalidArgumentError(StrCat("request ", i, ": ", r.prompt.size(),
                                               " prompt tokens plus ", r.max_new_tokens,
                                               " new tokens exceed the context of ",
                                               info.max_context_len));
    }
    if (BlocksFor(r) > cap.num_blocks) {
      return absl::ResourceExhaustedError(StrCat("request ", i, " needs ", BlocksFor(r),
                                                 " KV blocks; the cache has ", cap.num_blocks));
    }
  }
  return absl::OkStatus();
}

void OfflineRunner::Admit(int64_t step) {
  const KvCapacity& cap = executor_.capacity();
  while (next_request_ < requests_.size() &&
         static_cast<int32_t>(running_.size()) < cap.max_num_seqs) {
    const OfflineRequest& r = requests_[next_request_];
    if (r.first_step > step) break;
    const int64_t need = BlocksFor(r);
    if (need > static_cast<int64_t>(free_blocks_.size())) break;
    Running seq;
    seq.request = next_request_;
    seq.seq_id = SequenceId(options_.first_seq_id + next_request_);
    seq.num_tokens = static_cast<int32_t>(r.prompt.size());
    for (int64_t i = 0; i < need; ++i) {
      seq.blocks.push_back(free_blocks_.back());
      free_blocks_.pop_back();
    }
    results_[next_request_].seq_id = seq.seq_id;
    running_.push_back(std::move(seq));
    ++next_request_;
  }
}

StepPlan OfflineRunner::Plan(int64_t step) {
  StepPlan plan;
  plan.step_id = static_cast<uint64_t>(step);
  plan.finished = std::move(finished_);
  finished_.clear();
  int32_t budget = budget_;
  auto schedule = [&](Running& seq, int32_t count) {
    if (!seq.started) {
      NewSequencePlan p;
      p.seq_id = seq.seq_id;
      p.token_ids = requests_[seq.request].prompt;
      p.num_prompt_tokens = static_cast<int32_t>(p.token_ids.size());
      p.block_table = seq.blocks;  // reserved up front for the whole request
      p.num_scheduled_tokens = count;
      p.sampling = requests_[seq.request].sampling;
      plan.new_sequences.push_back(std::move(p));
      seq.started = true;
    } else {
      plan.continuing.push_back({seq.seq_id, {}, count});
    }
    budget -= count;
  };
  for (Running& seq : running_) {  // decodes first
    if (seq.started && seq.num_computed + 1 == seq.num_tokens && budget > 0) schedule(seq, 1);
  }
  for (Running& seq : running_) {  // then prompt chunks
    const int32_t left = seq.num_tokens - seq.num_computed;
    const bool prefilling = !seq.started || seq.num_computed + 1 < seq.num_tokens;
    if (!prefilling || budget <= 0) continue;
    int32_t count = std::min(left, budget);
    if (options_.prefill_chunk > 0) count = std::min(count, options_.prefill_chunk);
    schedule(seq, count);
  }
  return plan;
}

absl::Status OfflineRunner::Absorb(const StepResult& result, double elapsed_ms, bool had_prefill) {
  for (const SequenceOutput& out : result.outputs) {
    auto it = std::find_if(running_.begin(), running_.end(),
                           [&](const Running& r) { return r.seq_id == out.seq_id; });
    if (it == running_.end()) return absl::InternalError("output for an unknown sequence");
    OfflineResult& res = results_[it->request];
    const OfflineRequest& req = requests_[it->request];
    res.prompt_logprobs.insert(res.prompt_logprobs.end(), out.prompt_logprobs.begin(),
                               out.prompt_logprobs.end());
    if (!out.has_token()) continue;
    if (stats_ != nullptr && res.output_tokens.empty()) {
      stats_->first_token_ms[it->request] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    }
    res.output_tokens.push_back(out.token_id);
    res.logprobs.insert(res.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
    it->num_tokens += 1;
    const bool stop = std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(),
                                out.token_id) != req.stop_token_ids.end();
    if (stop) res.finish = OfflineFinish::kStopToken;
    if (stop || static_cast<int32_t>(res.output_tokens.size()) >= req.max_new_tokens) {
      it->done = true;
    }
  }
  if (stats_ != nullptr) {
    ++stats_->num_steps;
    (had_prefill ? stats_->prefill_ms : stats_->decode_ms) += elapsed_ms;
    if (result.expert_cache.slots > 0) stats_->expert_cache = result.expert_cache;
  }
  for (auto it = running_.begin(); it != running_.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    finished_.push_back(it->seq_id);
    free_blocks_.insert(free_blocks_.end(), it->blocks.begin(), it->blocks.end());
    it = running_.erase(it);
  }
  return absl::OkStatus();
}

// After a failed step, drops the engine state of every sequence the executor still holds: those
// it knew before `refused` (a refused plan changes nothing), including the ones `refused` was
// finishing. Best effort: the original error is what the caller reports.
void OfflineRunner::ReleaseAfterFailure(const StepPlan& refused) {
  StepPlan release;
  release.finished = refused.finished;
  for (const Running& seq : running_) {
    const bool new_in_refused =
        std::any_of(refused.new_sequences.begin(), refused.new_sequences.end(),
                    [&](const NewSequencePlan& p) { return p.seq_id == seq.seq_id; });
    if (seq.started && !new_in_refused) release.finished.push_back(seq.seq_id);
  }
  if (!release.finished.empty()) (void)executor_.Execute(release);
}

absl::StatusOr<std::vector<OfflineResult>> OfflineRunner::Run() {
  LOOM_RETURN_IF_ERROR(CheckRequests());
  LOOM_RETURN_IF_ERROR(Steps());
  return std::move(results_);
}

absl::Status OfflineRunner::Steps() {
  for (int64_t step = 0;; ++step) {
    Admit(step);
    if (running_.empty() && next_request_ == requests_.size()) break;
    StepPlan plan = Plan(step);
    int64_t prefill = 0, decode = 0;
    for (const NewSequencePlan& p : plan.new_sequences) prefill += p.num_scheduled_tokens;
    for (const ContinuingSequencePlan& p : plan.continuing) {
      const auto& seq = *std::find_if(running_.begin(), running_.end(),
                                      [&](const Running& r) { return r.seq_id == p.seq_id; });
      (seq.num_computed + 1 == seq.num_tokens ? decode : prefill) += p.num_scheduled_tokens;
    }
    // Track what each sequence will have computed after the step.
    for (const NewSequencePlan& p : plan.new_sequences) {
      for (Running& r : running_) if (r.seq_id == p.seq_id) r.num_computed += p.num_scheduled_tokens;
    }
    for (const ContinuingSequencePlan& p : plan.continuing) {
      for (Running& r : running_) if (r.seq_id == p.seq_id) r.num_computed += p.num_scheduled_tokens;
    }
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<StepResult> result = executor_.Execute(plan);
    if (!result.ok()) {
      ReleaseAfterFailure(plan);
      return result.status();
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (stats_ != nullptr) (prefill > 0 ? stats_->prefill_tokens : stats_->decode_tokens) +=
        prefill > 0 ? prefill : decode;
    if (absl::Status absorbed = Absorb(*result, ms, prefill > 0); !absorbed.ok()) {
      StepPlan none;
      none.finished = std::move(finished_);
      ReleaseAfterFailure(none);
      return absorbed;
    }
  }
  // Release the engine state of the last finished sequences.
  if (!finished_.empty()) {
    StepPlan last;
    last.finished = std::move(finished_);
    LOOM_RETURN_IF_ERROR(executor_.Execute(last).status());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<OfflineResult>> RunOffline(Executor& executor,
                                                      std::span<const OfflineRequest> requests,
                                                      const OfflineOptions& options,
                                                      OfflineStats* stats) {
  OfflineRunner runner(executor, requests, options, stats);
  return runner.Run();
}

}  // namespace loom
