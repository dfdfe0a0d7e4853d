// One /v1/completions or /v1/chat/completions request after validation: its generations (one per
// prompt), and the writer that turns their events into an OpenAI response — server-sent events
// when streaming, one JSON body otherwise.
//
// With `echo`, a choice's first chunk (or its whole text) starts with the prompt: for completions
// the prompt's text and, with `logprobs`, its tokens' scores (completion_logprobs.h); for chat the
// content of the last message when that message is the assistant's (vLLM's chat echo; the
// prompt's scores are not part of chat).
//
// Work runs on a WorkQueue: a generation's notifier (engine loop thread) only schedules a Pump;
// Pump polls every generation under the job's lock and writes what is ready. Errors before any
// byte was sent are real HTTP errors (a full queue: 503 with Retry-After); after the stream
// started they are an error event followed by `data: [DONE]`. A client that disconnects cancels
// every generation, which frees their KV blocks at the next engine step.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/common/json_writer.h"
#include "server/api/completion_logprobs.h"
#include "server/api/openai_params.h"
#include "server/http/http_types.h"
#include "server/serving/generation.h"
#include "server/serving/work_queue.h"

namespace loom::api {

class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  struct PromptInfo {
    std::vector<int32_t> ids;  // moved into the generation request before the job starts
    // Prepended to each choice's text when `echo` is set: the prompt's text (completions), the
    // last message's content when it is the assistant's (chat), else empty.
    std::string echo_text;
  };

  // Starts a generation per prompt and wires notifications and cancellation.
  static void Start(ServingContext& context, WorkQueue& work, CompletionParams params,
                    std::vector<PromptInfo> prompts, std::vector<GenerationRequest> requests,
                    std::shared_ptr<http::Responder> responder, int64_t arrival_ms);

 private:
  struct ChoiceState {
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<PositionLogprobs> chat_logprobs;
    std::vector<CompletionTokenLogprob> logprobs;  // completions: the echoed prompt's first
    size_t logprobs_end_offset = 0;  // text_offset after the last entry of `logprobs`
    std::string finish_reason;
    bool echoed = false;
  };
  // What one streamed chunk of a choice carries.
  struct Piece {
    std::string text;
    std::vector<PositionLogprobs> chat_logprobs;
    std::vector<CompletionTokenLogprob> logprobs;
    size_t text_offset = 0;  // of the first entry of `logprobs`, in code points
    std::string finish_reason;
    std::optional<std::string> matched_stop;
  };

  CompletionJob(ServingContext& context, WorkQueue& work, CompletionParams params,
                std::vector<PromptInfo> prompts, std::shared_ptr<http::Responder> responder);
  void Schedule();
  void Pump();
  void Fail(const absl::Status& error);
  void StartStreamIfReady();
  void FlushEarlyOutput();
  // The piece of choice `index` that `event` (of prompt `g`) makes, echo included; appended to
  // the choice's state.
  Piece Absorb(size_t g, int32_t index, const ChoiceEvent& event);
  // The echoed prompt's entries of a completion's logprobs.
  std::vector<CompletionTokenLogprob> PromptLogprobs(size_t g) const;
  CompletionTokenLogprob CompletionEntry(const PositionLogprobs& p) const;
  void WriteChunk(int32_t index, const Piece& piece);
  void Finish();
  // Marks the job over (once): it no longer counts as in flight.
  void End();
  std::string ResponseBody() const;
  void WriteUsage(JsonWriter& w) const;
  void WriteChatLogprobs(JsonWriter& w, const std::vector<PositionLogprobs>& lps) const;
  std::string TokenText(int32_t id) const;
  void Header(JsonWriter& w, bool chunk) const;
  void BeginChunkChoice(JsonWriter& w, int32_t index) const;

  ServingContext& context_;
  WorkQueue& work_;
  const CompletionParams params_;
  const std::vector<PromptInfo> prompts_;
  std::shared_ptr<http::Responder> responder_;
  const std::string id_;
  const int64_t created_;

  std::mutex mu_;
  std::atomic<bool> scheduled_{false};
  std::vector<std::shared_ptr<Generation>> generations_;
  std::vector<bool> accepted_;
  std::vector<bool> done_;
  std::vector<ChoiceState> choices_;  // prompt-major: prompt * n + choice
  bool streaming_started_ = false;
  bool finished_ = false;
};

}  // namespace loom::api
