#include "scheduler/request_stream.h"

#include <utility>

namespace loom {

void RequestStream::Push(ChoiceOutput output) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (output.finish != FinishReason::kNone) ++num_finished_;
    ChoiceOutput* merged = nullptr;
    for (ChoiceOutput& p : pending_) {
      if (p.index == output.index) merged = &p;
    }
    if (merged == nullptr) {
      pending_.push_back(std::move(output));
    } else {
      merged->new_tokens.insert(merged->new_tokens.end(), output.new_tokens.begin(),
                                output.new_tokens.end());
      merged->logprobs.insert(merged->logprobs.end(), output.logprobs.begin(),
                              output.logprobs.end());
      merged->prompt_logprobs.insert(merged->prompt_logprobs.end(),
                                     output.prompt_logprobs.begin(),
                                     output.prompt_logprobs.end());
      merged->finish = output.finish;
      merged->num_cached_tokens = output.num_cached_tokens;
      merged->first_scheduled_ms = output.first_scheduled_ms;
    }
  }
  Notify();
}

void RequestStream::Fail(absl::Status error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;
    failed_ = true;
    error_ = std::move(error);
  }
  Notify();
}

void RequestStream::MarkAccepted() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepted_ = true;
  }
  Notify();
}

void RequestStream::Notify() {
  cv_.notify_all();
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notify = notify_;
  }
  if (notify) notify();
}

StreamBatch RequestStream::TakeLocked() {
  StreamBatch batch;
  batch.outputs = std::move(pending_);
  pending_.clear();
  batch.accepted = accepted_;
  accepted_reported_ = accepted_;
  batch.done = failed_ || num_finished_ >= num_choices_;
  batch.error = error_;
  if (batch.done) done_reported_ = true;
  return batch;
}

StreamBatch RequestStream::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  return TakeLocked();
}

StreamBatch RequestStream::Wait(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] {
    return !pending_.empty() || failed_ || (accepted_ && !accepted_reported_) ||
           (num_finished_ >= num_choices_ && !done_reported_);
  });
  return TakeLocked();
}

void RequestStream::SetNotifier(std::function<void()> notify) {
  std::lock_guard<std::mutex> lock(mu_);
  notify_ = std::move(notify);
}

}  // namespace loom
