// One /v1/completions or /v1/chat/completions request after validation: its generations (one per
// prompt), and the writer that turns their events into an OpenAI response — server-sent events
// when streaming, one JSON body otherwise.
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
#include <string>
#include <vector>

#include "engine/common/json_writer.h"
#include "server/api/openai_params.h"
#include "server/http/http_types.h"
#include "server/serving/generation.h"
#include "server/serving/work_queue.h"

namespace loom::api {

class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  struct PromptInfo {
    std::vector<int32_t> ids;  // moved into the generation request before the job starts
    std::string echo_text;     // the prompt's text, prepended when `echo` is set
  };

  // Starts a generation per prompt and wires notifications and cancellation.
  static void Start(ServingContext& context, WorkQueue& work, CompletionParams params,
                    std::vector<PromptInfo> prompts, std::vector<GenerationRequest> requests,
                    std::shared_ptr<http::Responder> responder, int64_t arrival_ms);

 private:
  struct ChoiceState {
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<PositionLogprobs> logprobs;
    std::string finish_reason;
    bool echoed = false;
  };

  CompletionJob(ServingContext& context, WorkQueue& work, CompletionParams params,
                std::vector<PromptInfo> prompts, std::shared_ptr<http::Responder> responder);
  void Schedule();
  void Pump();
  void Fail(const absl::Status& error);
  void StartStreamIfReady();
  void FlushEarlyOutput();
  // `text_offset`: where `text` starts in the choice's whole text (completions' logprobs).
  void WriteChunk(int32_t choice, const ChoiceEvent& event, const std::string& text,
                  size_t text_offset);
  void Finish();
  // Marks the job over (once): it no longer counts as in flight.
  void End();
  std::string ResponseBody() const;
  void WriteUsage(JsonWriter& w) const;
  void WriteLogprobs(JsonWriter& w, const std::vector<PositionLogprobs>& lps,
                     size_t text_offset) const;
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
