#include "server/serving/generation.h"

#include <algorithm>
#include <utility>

namespace loom {

std::shared_ptr<Generation> Generation::Start(ServingContext& context, GenerationRequest request,
                                              int64_t arrival_ms) {
  return std::shared_ptr<Generation>(new Generation(context, std::move(request), arrival_ms));
}

Generation::Generation(ServingContext& context, GenerationRequest request, int64_t arrival_ms)
    : context_(context),
      request_(std::move(request)),
      id_(RequestId(context.next_request_id.fetch_add(1))),
      arrival_ms_(arrival_ms) {
  SchedRequest r;
  r.id = id_;
  for (int32_t t : request_.prompt_ids) r.prompt.push_back(TokenId(t));
  r.sampling = request_.sampling;
  if (!request_.has_seed) {
    // Distinct seeds per request; with one given, runs are reproducible.
    r.sampling.seed = context.next_seed.fetch_add(0x9E3779B97F4A7C15ull);
  }
  r.max_new_tokens = request_.max_tokens;
  for (int32_t t : request_.stop_token_ids) r.stop_token_ids.push_back(TokenId(t));
  if (!request_.ignore_eos) {
    // End of sequence as config.json/generation_config.json and tokenizer_config.json name it.
    std::vector<int32_t> eos;
    for (TokenId t : context.model.eos_token_ids) eos.push_back(t.value());
    if (context.tokenizer != nullptr) {
      const std::vector<int32_t>& more = context.tokenizer->eos_token_ids();
      eos.insert(eos.end(), more.begin(), more.end());
    }
    for (int32_t t : eos) {
      if (t >= 0 && t < context.model.vocab_size &&
          std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), TokenId(t)) ==
              r.stop_token_ids.end()) {
        r.stop_token_ids.push_back(TokenId(t));
      }
    }
  }
  if (r.sampling.min_tokens > 0) r.sampling.min_tokens_banned_ids = r.stop_token_ids;
  r.priority = request_.priority;
  r.cache_salt = request_.cache_salt;
  r.deadline_ms = request_.deadline_ms;
  r.n = request_.n;
  choices_.resize(static_cast<size_t>(std::max(request_.n, 1)));
  if (context.tokenizer != nullptr) {
    text::Detokenizer::Options options;
    options.skip_special_tokens = request_.skip_special_tokens;
    options.stop_strings = request_.stop;
    for (Choice& c : choices_) {
      c.detokenizer = std::make_unique<text::Detokenizer>(context.tokenizer.get(), options);
    }
  }
  stream_ = context.submit ? context.submit(std::move(r)) : context.engine->Submit(std::move(r));
}

Generation::~Generation() {
  if (!done_) Cancel();
}

void Generation::SetNotifier(std::function<void()> notify) { stream_->SetNotifier(std::move(notify)); }

Generation::Batch Generation::Poll() { return Convert(stream_->Drain()); }

void Generation::Cancel() {
  if (done_) return;
  context_.engine->Abort(id_);
  done_ = true;
  Record("abort");
}

void Generation::Absorb(const ChoiceOutput& out, std::vector<ChoiceEvent>* events) {
  if (out.index < 0 || out.index >= static_cast<int32_t>(choices_.size())) return;
  Choice& c = choices_[out.index];
  cached_tokens_ = std::max(cached_tokens_, out.num_cached_tokens);
  if (out.first_scheduled_ms >= 0 &&
      (first_scheduled_ms_ < 0 || out.first_scheduled_ms < first_scheduled_ms_)) {
    first_scheduled_ms_ = out.first_scheduled_ms;
  }
  if (c.finished) return;  // ended by a stop string; the engine's late tokens are dropped
  ChoiceEvent e;
  e.index = out.index;
  const int64_t now = context_.now_ms();
  for (size_t i = 0; i < out.new_tokens.size() && !c.finished; ++i) {
    const int32_t id = out.new_tokens[i].value();
    e.token_ids.push_back(id);
    if (i < out.logprobs.size()) e.logprobs.push_back(out.logprobs[i]);
    ++c.num_tokens;
    if (first_token_ms_ < 0) first_token_ms_ = now;
    if (c.detokenizer == nullptr) continue;
    e.text += c.detokenizer->Add(id);
    if (c.detokenizer->stopped()) {
      c.finished = true;
      c.finish_reason = "stop";
      // The engine need not compute this choice further.
      if (choices_.size() > 1) context_.engine->AbortChoice(id_, out.index);
      e.matched_stop = request_.stop[*c.detokenizer->stop_index()];
      if (request_.include_stop_str_in_output) e.text += *e.matched_stop;
    }
  }
  if (!out.new_tokens.empty()) {
    if (c.last_token_ms >= 0 && context_.metrics != nullptr && !e.token_ids.empty()) {
      context_.metrics->ObserveInterToken(static_cast<double>(now - c.last_token_ms) / 1000.0,
                                          static_cast<int64_t>(e.token_ids.size()));
    }
    c.last_token_ms = now;
  }
  if (!c.finished && out.finish != FinishReason::kNone) {
    if (c.detokenizer != nullptr) {
      e.text += c.detokenizer->Finish();
      if (c.detokenizer->stopped()) {
        e.matched_stop = request_.stop[*c.detokenizer->stop_index()];
        if (request_.include_stop_str_in_output) e.text += *e.matched_stop;
      }
    }
    c.finished = true;
    c.finish_reason = c.detokenizer != nullptr && c.detokenizer->stopped()
                          ? "stop"
                          : FinishReasonName(out.finish);
  }
  e.finish_reason = c.finished ? c.finish_reason : "";
  e.completion_tokens = c.num_tokens;
  if (!e.token_ids.empty() || !e.text.empty() || c.finished) events->push_back(std::move(e));
}

Generation::Batch Generation::Convert(StreamBatch batch) {
  Batch out;
  if (done_) {
    out.done = true;
    return out;
  }
  // The prompt's scores first: they must be complete before any choice's first event is used.
  for (const ChoiceOutput& o : batch.outputs) {
    prompt_logprobs_.insert(prompt_logprobs_.end(), o.prompt_logprobs.begin(),
                            o.prompt_logprobs.end());
  }
  for (const ChoiceOutput& o : batch.outputs) Absorb(o, &out.events);
  const bool all_finished = std::all_of(choices_.begin(), choices_.end(),
                                        [](const Choice& c) { return c.finished; });
  if (all_finished && !batch.done && !aborted_engine_) {
    // Every choice ended on a stop string: the engine need not go on.
    context_.engine->Abort(id_);
    aborted_engine_ = true;
  }
  out.error = batch.error;
  out.accepted = batch.accepted;
  out.done = all_finished || batch.done;
  if (out.done) {
    done_ = true;
    if (!out.error.ok() && !out.accepted && IsRejection(out.error)) {
      // Refused at admission (a full queue, a request the scheduler cannot hold): it never ran.
      recorded_ = true;
      if (context_.metrics != nullptr) context_.metrics->ObserveRejected(out.error);
    } else {
      Record(!out.error.ok() ? "error" : choices_.front().finish_reason);
    }
  }
  return out;
}

void Generation::Record(const std::string& reason) {
  if (recorded_ || context_.metrics == nullptr) return;
  recorded_ = true;
  const int64_t end = context_.now_ms();
  RequestRecord r;
  r.finished_reason = reason.empty() ? "abort" : reason;
  r.e2e_s = static_cast<double>(end - arrival_ms_) / 1000.0;
  if (first_scheduled_ms_ >= 0) {
    r.queue_s = static_cast<double>(first_scheduled_ms_ - arrival_ms_) / 1000.0;
  }
  if (first_token_ms_ >= 0) {
    r.ttft_s = static_cast<double>(first_token_ms_ - arrival_ms_) / 1000.0;
    r.decode_s = static_cast<double>(end - first_token_ms_) / 1000.0;
    if (first_scheduled_ms_ >= 0) {
      r.prefill_s = static_cast<double>(first_token_ms_ - first_scheduled_ms_) / 1000.0;
    }
  }
  r.prompt_tokens = static_cast<int64_t>(request_.prompt_ids.size());
  for (const Choice& c : choices_) r.generation_tokens += c.num_tokens;
  r.n = request_.n;
  context_.metrics->ObserveRequest(r);
}

}  // namespace loom
