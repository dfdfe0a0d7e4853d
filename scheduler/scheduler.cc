#include "scheduler/scheduler.h"

#include <algorithm>
#include <tuple>

#include "engine/common/logging.h"
#include "engine/common/strings.h"
#include "scheduler/scheduler_state.h"

namespace loom {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kDeadline: return "deadline";
  }
  return "unknown";
}

Scheduler::Scheduler(const SchedulerConfig& config, const ModelInfo& model,
                     const KvCapacity& capacity)
    : config_(config),
      model_(model),
      pool_(capacity.num_blocks, capacity.block_size, config.enable_prefix_caching) {
  config_.max_num_batched_tokens =
      std::min(config_.max_num_batched_tokens, capacity.max_num_batched_tokens);
  config_.max_num_seqs = std::min(config_.max_num_seqs, capacity.max_num_seqs);
  LOOM_CHECK(config_.max_num_batched_tokens >= 1 && config_.max_num_seqs >= 1,
             "scheduler budget and sequence cap must be positive");
  absl::StatusOr<std::unique_ptr<ExpertCacheDriver>> experts =
      ExpertCacheDriver::Create(model, capacity.expert_cache_slots, config.expert_cache);
  LOOM_CHECK(experts.ok(), "expert cache policy: ", experts.status().message());
  experts_ = *std::move(experts);
}

Scheduler::~Scheduler() = default;

absl::Status Scheduler::Add(SchedRequest request) {
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0) return absl::InvalidArgumentError("the prompt is empty");
  if (request.n < 1) return absl::InvalidArgumentError(StrCat("n is ", request.n, "; must be >= 1"));
  if (request.max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        StrCat("max_new_tokens is ", request.max_new_tokens, "; must be >= 0"));
  }
  if (prompt_len + request.max_new_tokens > model_.max_context_len) {
    return absl::InvalidArgumentError(
        StrCat("the prompt (", prompt_len, " tokens) plus max_new_tokens (",
               request.max_new_tokens, ") exceeds the model's context of ",
               model_.max_context_len, " tokens"));
  }
  for (TokenId t : request.prompt) {
    if (t.value() < 0 || t.value() >= model_.vocab_size) {
      return absl::InvalidArgumentError(
          StrCat("token id ", t, " is outside the vocabulary [0, ", model_.vocab_size, ")"));
    }
  }
  const int64_t bs = pool_.block_size();
  const int64_t blocks = (prompt_len + request.max_new_tokens + bs - 1) / bs;
  if (blocks > pool_.num_blocks()) {
    return absl::InvalidArgumentError(StrCat("the request needs ", blocks,
                                             " KV blocks; the whole cache has ",
                                             pool_.num_blocks()));
  }
  if (requests_.contains(request.id)) {
    return absl::InvalidArgumentError(StrCat("request id ", request.id, " is already running"));
  }
  if (config_.max_waiting_requests > 0 && waiting_requests_ >= config_.max_waiting_requests) {
    return absl::ResourceExhaustedError(
        StrCat("the waiting queue is full (", waiting_requests_, " requests)"));
  }
  if (config_.max_waiting_prompt_tokens > 0 &&
      waiting_prompt_tokens_ + prompt_len > config_.max_waiting_prompt_tokens) {
    return absl::ResourceExhaustedError(StrCat("the waiting queue holds ", waiting_prompt_tokens_,
                                               " prompt tokens; this request's ", prompt_len,
                                               " would pass the limit of ",
                                               config_.max_waiting_prompt_tokens));
  }
  auto req = std::make_unique<Req>();
  req->params = std::move(request);
  req->arrival = next_arrival_++;
  waiting_prompt_tokens_ += prompt_len;
  ++waiting_requests_;
  for (int32_t i = 0; i < req->params.n; ++i) InsertWaiting(NewSeq(*req, i));
  requests_.emplace(req->params.id, std::move(req));
  return absl::OkStatus();
}

Scheduler::Seq* Scheduler::NewSeq(Req& req, int32_t index) {
  auto seq = std::make_unique<Seq>();
  seq->req = &req;
  seq->index = index;
  seq->tokens = req.params.prompt;
  seq->num_prompt = static_cast<int32_t>(seq->tokens.size());
  seq->last_hash = RootBlockHash(req.params.cache_salt);
  req.seqs.push_back(std::move(seq));
  return req.seqs.back().get();
}

void Scheduler::InsertWaiting(Seq* seq) {
  seq->state = Seq::State::kWaiting;
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, Seq::MoreImportant),
                  seq);
}

void Scheduler::Abort(RequestId id) { aborts_.push_back(id); }

void Scheduler::AbortChoice(RequestId id, int32_t index) { choice_aborts_.emplace_back(id, index); }

bool Scheduler::HasWork() const {
  return !running_.empty() || !waiting_.empty() || !released_.empty() || !aborts_.empty() ||
         !choice_aborts_.empty() || !pending_exports_.empty() || !pending_imports_.empty();
}

}  // namespace loom
