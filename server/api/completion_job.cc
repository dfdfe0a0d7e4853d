#include "server/api/completion_job.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/str_format.h"

#include "engine/common/strings.h"
#include "server/api/api_status.h"
#include "server/http/http_server.h"

namespace loom::api {
namespace {

bool IsChat(const CompletionParams& p) { return p.kind == EndpointKind::kChat; }

}  // namespace

void CompletionJob::Start(ServingContext& context, WorkQueue& work, CompletionParams params,
                          std::vector<PromptInfo> prompts, std::vector<GenerationRequest> requests,
                          std::shared_ptr<http::Responder> responder, int64_t arrival_ms) {
  std::shared_ptr<CompletionJob> job(new CompletionJob(context, work, std::move(params),
                                                       std::move(prompts), responder));
  std::lock_guard<std::mutex> lock(job->mu_);
  context.num_inflight_responses.fetch_add(1);
  for (GenerationRequest& r : requests) {
    job->generations_.push_back(Generation::Start(context, std::move(r), arrival_ms));
  }
  job->accepted_.assign(job->generations_.size(), false);
  job->done_.assign(job->generations_.size(), false);
  std::weak_ptr<CompletionJob> weak = job;
  for (auto& g : job->generations_) {
    g->SetNotifier([weak] {
      if (auto j = weak.lock()) j->Schedule();
    });
  }
  // The job lives as long as the responder holds this callback or a task holds the job.
  responder->OnCancel([job] {
    std::lock_guard<std::mutex> lock(job->mu_);
    if (job->finished_) return;
    job->End();
    for (auto& g : job->generations_) g->Cancel();
  });
  job->Schedule();  // anything that arrived before the notifiers were set
}

CompletionJob::CompletionJob(ServingContext& context, WorkQueue& work, CompletionParams params,
                             std::vector<PromptInfo> prompts,
                             std::shared_ptr<http::Responder> responder)
    : context_(context),
      work_(work),
      params_(std::move(params)),
      prompts_(std::move(prompts)),
      responder_(std::move(responder)),
      // Unique per job: the counter is taken, not just read.
      id_(StrCat(IsChat(params_) ? "chatcmpl-" : "cmpl-", absl::StrFormat("%x%06x",
                 static_cast<uint64_t>(std::time(nullptr)), context.next_request_id.fetch_add(1)))),
      created_(static_cast<int64_t>(std::time(nullptr))) {
  choices_.resize(prompts_.size() * static_cast<size_t>(params_.n));
}

void CompletionJob::Schedule() {
  if (scheduled_.exchange(true)) return;
  work_.Post([self = shared_from_this()] { self->Pump(); });
}

void CompletionJob::Pump() {
  std::lock_guard<std::mutex> lock(mu_);
  scheduled_ = false;  // a notification from now on schedules another pump
  if (finished_) return;
  // Poll every generation first: the stream starts only once all of them are admitted, and the
  // events of this pump are then written after the stream's first chunks.
  std::vector<Generation::Batch> batches(generations_.size());
  for (size_t g = 0; g < generations_.size(); ++g) {
    if (done_[g]) continue;
    batches[g] = generations_[g]->Poll();
    if (!batches[g].error.ok()) return Fail(batches[g].error);
    accepted_[g] = accepted_[g] || batches[g].accepted || !batches[g].events.empty();
  }
  StartStreamIfReady();
  for (size_t g = 0; g < generations_.size(); ++g) {
    if (done_[g]) continue;
    for (const ChoiceEvent& e : batches[g].events) {
      const int32_t index = static_cast<int32_t>(g) * params_.n + e.index;
      Piece piece = Absorb(g, index, e);
      if (streaming_started_) WriteChunk(index, piece);
    }
    done_[g] = batches[g].done;
  }
  if (std::all_of(done_.begin(), done_.end(), [](bool d) { return d; })) Finish();
}

CompletionJob::Piece CompletionJob::Absorb(size_t g, int32_t index, const ChoiceEvent& e) {
  ChoiceState& c = choices_[index];
  Piece piece;
  piece.text = e.text;
  piece.finish_reason = e.finish_reason;
  piece.matched_stop = e.matched_stop;
  const bool completion_logprobs = !IsChat(params_) && params_.logprobs >= 0;
  if (params_.echo && !c.echoed) {
    piece.text = prompts_[g].echo_text + piece.text;
    if (completion_logprobs) piece.logprobs = PromptLogprobs(g);
    c.echoed = true;
  }
  if (IsChat(params_)) {
    piece.chat_logprobs = e.logprobs;
  } else if (completion_logprobs) {
    for (const PositionLogprobs& p : e.logprobs) piece.logprobs.push_back(CompletionEntry(p));
  }
  piece.text_offset = c.logprobs_end_offset;
  c.logprobs_end_offset = EndOffset(piece.logprobs, piece.text_offset);
  c.text += piece.text;
  c.token_ids.insert(c.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
  c.chat_logprobs.insert(c.chat_logprobs.end(), piece.chat_logprobs.begin(),
                         piece.chat_logprobs.end());
  c.logprobs.insert(c.logprobs.end(), piece.logprobs.begin(), piece.logprobs.end());
  if (!e.finish_reason.empty()) c.finish_reason = e.finish_reason;
  return piece;
}

// The prompt's first token has no score; the scheduler reports the others before any choice's
// first event. A request cut short before its prompt was computed (deadline, abort) leaves the
// rest unscored too.
std::vector<CompletionTokenLogprob> CompletionJob::PromptLogprobs(size_t g) const {
  const std::vector<int32_t>& ids = generations_[g]->prompt_ids();
  const std::vector<PositionLogprobs>& scores = generations_[g]->prompt_logprobs();
  std::vector<CompletionTokenLogprob> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0 && i - 1 < scores.size()) {
      out.push_back(CompletionEntry(scores[i - 1]));
    } else {
      out.push_back(CompletionTokenLogprob{TokenText(ids[i]), std::nullopt, {}});
    }
  }
  return out;
}

CompletionTokenLogprob CompletionJob::CompletionEntry(const PositionLogprobs& p) const {
  CompletionTokenLogprob entry{TokenText(p.token.token_id.value()), p.token.logprob, {}};
  for (const TokenLogprob& t : p.top) {
    entry.top.emplace_back(TokenText(t.token_id.value()), t.logprob);
  }
  return entry;
}

void CompletionJob::StartStreamIfReady() {
  if (!params_.stream || streaming_started_) return;
  if (!std::all_of(accepted_.begin(), accepted_.end(), [](bool a) { return a; })) return;
  streaming_started_ = true;
  responder_->StartStream(200, "text/event-stream",
                          {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
  // OpenAI's first chat chunk of each choice carries only the role.
  for (size_t i = 0; i < choices_.size() && IsChat(params_); ++i) {
    JsonWriter w;
    BeginChunkChoice(w, static_cast<int32_t>(i));
    w.Key("delta");
    w.BeginObject();
    w.Key("role");
    w.String("assistant");
    w.Key("content");
    w.String("");
    w.EndObject();
    w.Key("logprobs");
    w.Null();
    w.Key("finish_reason");
    w.Null();
    w.EndObject();
    w.EndArray();
    w.EndObject();
    responder_->Write(StrCat("data: ", w.str(), "\n\n"));
  }
  FlushEarlyOutput();
}

// Output that arrived before every prompt of the request was admitted (a batch of prompts whose
// generations were accepted in different pumps) goes out as one chunk per choice.
void CompletionJob::FlushEarlyOutput() {
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceState& c = choices_[i];
    Piece piece;
    piece.text = c.text;
    piece.chat_logprobs = c.chat_logprobs;
    piece.logprobs = c.logprobs;
    piece.finish_reason = c.finish_reason;
    WriteChunk(static_cast<int32_t>(i), piece);
  }
}

void CompletionJob::Header(JsonWriter& w, bool chunk) const {
  w.BeginObject();
  w.Key("id");
  w.String(id_);
  w.Key("object");
  w.String(IsChat(params_) ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion");
  w.Key("created");
  w.Int(created_);
  w.Key("model");
  w.String(context_.model_id);
}

// `{<header>, "choices": [{"index": index` — the opening every streamed choice chunk shares.
void CompletionJob::BeginChunkChoice(JsonWriter& w, int32_t index) const {
  Header(w, true);
  w.Key("choices");
  w.BeginArray();
  w.BeginObject();
  w.Key("index");
  w.Int(index);
}

void CompletionJob::WriteChunk(int32_t index, const Piece& piece) {
  if (piece.text.empty() && piece.finish_reason.empty() && piece.logprobs.empty() &&
      piece.chat_logprobs.empty()) {
    return;
  }
  JsonWriter w;
  BeginChunkChoice(w, index);
  if (IsChat(params_)) {
    w.Key("delta");
    w.BeginObject();
    if (!piece.text.empty() || piece.finish_reason.empty()) {
      w.Key("content");
      w.String(piece.text);
    }
    w.EndObject();
  } else {
    w.Key("text");
    w.String(piece.text);
  }
  w.Key("logprobs");
  if (params_.logprobs >= 0 && IsChat(params_) && !piece.chat_logprobs.empty()) {
    WriteChatLogprobs(w, piece.chat_logprobs);
  } else if (params_.logprobs >= 0 && !IsChat(params_) && !piece.logprobs.empty()) {
    WriteCompletionLogprobs(w, piece.logprobs, piece.text_offset);
  } else {
    w.Null();
  }
  w.Key("finish_reason");
  if (piece.finish_reason.empty()) {
    w.Null();
  } else {
    w.String(piece.finish_reason);
  }
  if (piece.matched_stop.has_value()) {
    w.Key("stop_reason");
    w.String(*piece.matched_stop);
  }
  w.EndObject();
  w.EndArray();
  w.EndObject();
  responder_->Write(StrCat("data: ", w.str(), "\n\n"));
}

std::string CompletionJob::TokenText(int32_t id) const {
  if (context_.tokenizer == nullptr) return StrCat("token_id:", id);
  return context_.tokenizer->Decode(std::vector<int32_t>{id}, false);
}

void CompletionJob::WriteChatLogprobs(JsonWriter& w,
                                      const std::vector<PositionLogprobs>& lps) const {
  const auto number = [&](float v) { w.Double(std::isfinite(v) ? v : -9999.0); };
  const auto entry = [&](const TokenLogprob& t) {
    const std::string s = TokenText(t.token_id.value());
    w.Key("token");
    w.String(s);
    w.Key("logprob");
    number(t.logprob);
    w.Key("bytes");
    w.BeginArray();
    for (unsigned char ch : s) w.Int(ch);
    w.EndArray();
  };
  w.BeginObject();
  w.Key("content");
  w.BeginArray();
  for (const PositionLogprobs& p : lps) {
    w.BeginObject();
    entry(p.token);
    w.Key("top_logprobs");
    w.BeginArray();
    for (const TokenLogprob& t : p.top) {
      w.BeginObject();
      entry(t);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

void CompletionJob::WriteUsage(JsonWriter& w) const {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t g = 0; g < generations_.size(); ++g) {
    prompt += generations_[g]->prompt_tokens();
    cached += generations_[g]->cached_tokens();
  }
  for (const ChoiceState& c : choices_) completion += static_cast<int64_t>(c.token_ids.size());
  w.Key("usage");
  w.BeginObject();
  w.Key("prompt_tokens");
  w.Int(prompt);
  w.Key("completion_tokens");
  w.Int(completion);
  w.Key("total_tokens");
  w.Int(prompt + completion);
  w.Key("prompt_tokens_details");
  w.BeginObject();
  w.Key("cached_tokens");
  w.Int(cached);
  w.EndObject();
  w.EndObject();
}

std::string CompletionJob::ResponseBody() const {
  JsonWriter w;
  Header(w, false);
  w.Key("choices");
  w.BeginArray();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceState& c = choices_[i];
    w.BeginObject();
    w.Key("index");
    w.Int(static_cast<int64_t>(i));
    if (IsChat(params_)) {
      w.Key("message");
      w.BeginObject();
      w.Key("role");
      w.String("assistant");
      w.Key("content");
      w.String(c.text);
      w.EndObject();
    } else {
      w.Key("text");
      w.String(c.text);
    }
    w.Key("logprobs");
    if (params_.logprobs >= 0 && IsChat(params_)) {
      WriteChatLogprobs(w, c.chat_logprobs);
    } else if (params_.logprobs >= 0) {
      WriteCompletionLogprobs(w, c.logprobs, 0);
    } else {
      w.Null();
    }
    w.Key("finish_reason");
    w.String(c.finish_reason.empty() ? "length" : c.finish_reason);
    w.EndObject();
  }
  w.EndArray();
  WriteUsage(w);
  w.EndObject();
  return std::move(w).Take();
}

void CompletionJob::End() {
  if (finished_) return;
  finished_ = true;
  context_.num_inflight_responses.fetch_sub(1);
}

void CompletionJob::Finish() {
  End();
  if (!params_.stream) {
    http::Response r;
    r.body = ResponseBody();
    responder_->Send(std::move(r));
    responder_->OnCancel({});  // drops the callback that holds this job
    return;
  }
  StartStreamIfReady();
  if (params_.include_usage) {
    JsonWriter w;
    Header(w, true);
    w.Key("choices");
    w.BeginArray();
    w.EndArray();
    WriteUsage(w);
    w.EndObject();
    responder_->Write(StrCat("data: ", w.str(), "\n\n"));
  }
  responder_->Write("data: [DONE]\n\n");
  responder_->End();
  responder_->OnCancel({});
}

void CompletionJob::Fail(const absl::Status& error) {
  End();
  for (auto& g : generations_) g->Cancel();
  if (!streaming_started_) {
    responder_->Send(ErrorResponseFor(error, context_.config.retry_after_s));
    responder_->OnCancel({});
    return;
  }
  const std::string body = http::ErrorBody(std::string(error.message()),
                                           OpenAiErrorType(error.code()),
                                           ParamOf(error), HttpStatusFor(error.code()));
  responder_->Write(StrCat("data: ", body, "\n\n"));
  responder_->Write("data: [DONE]\n\n");
  responder_->End();
  responder_->OnCancel({});
}

}  // namespace loom::api
