// The serving core shared by the HTTP (OpenAI) and gRPC front ends: one request from validated
// parameters to text events.
//
// A Generation submits a scheduler request to the engine loop and turns what comes back into
// per-choice events: new token ids, the text they completed (incremental detokenization, UTF-8
// safe), log-probabilities (and, when asked, the prompt's, kept for the whole request), and the
// finish — length, stop token, a stop string (the text stops
// before it; the engine request is aborted once every choice is done), abort or deadline. When
// it ends, whatever the reason, its timings go to the metrics.
//
// Thread safety: Poll and Cancel from one consumer at a time; the notifier runs on the engine
// loop thread and must only schedule a Poll elsewhere. End of sequence is every id the model's
// config, generation_config.json and tokenizer_config.json name (unless ignore_eos).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/sampling_params.h"
#include "scheduler/request.h"
#include "server/serving/serving_context.h"
#include "server/text/detokenizer.h"

namespace loom {

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  // 0: the prompt is only computed (for its log-probabilities, sampling.prompt_logprobs >= 0);
  // every choice finishes with "length" and no tokens.
  int32_t max_tokens = 16;
  int32_t n = 1;
  SamplingParams sampling;  // the seed is chosen when the client gave none
  bool has_seed = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  int32_t priority = 0;
  std::string cache_salt;
  int64_t deadline_ms = 0;
};

// What one choice produced since the last Poll.
struct ChoiceEvent {
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<PositionLogprobs> logprobs;
  // Empty while running; then "stop", "length", "abort" or "deadline".
  std::string finish_reason;
  std::optional<std::string> matched_stop;  // the stop string, when one ended the choice
  int32_t completion_tokens = 0;            // so far
};

class Generation {
 public:
  struct Batch {
    std::vector<ChoiceEvent> events;
    bool accepted = false;  // the engine admitted the request (see StreamBatch::accepted)
    bool done = false;
    absl::Status error;  // the request failed as a whole
  };

  // Starts the request. `arrival_ms` is when the client's request arrived (for latency metrics).
  static std::shared_ptr<Generation> Start(ServingContext& context, GenerationRequest request,
                                           int64_t arrival_ms);
  ~Generation();

  Batch Poll();
  void SetNotifier(std::function<void()> notify);
  // The client went away: abort the engine request (its metrics say "abort").
  void Cancel();

  RequestId id() const { return id_; }
  const std::vector<int32_t>& prompt_ids() const { return request_.prompt_ids; }
  int32_t prompt_tokens() const { return static_cast<int32_t>(request_.prompt_ids.size()); }
  // With sampling.prompt_logprobs >= 0: the scores of prompt tokens 1.. received so far (entry i
  // scores prompt token i + 1). All of them have arrived by the Poll that returns any choice's
  // first event.
  const std::vector<PositionLogprobs>& prompt_logprobs() const { return prompt_logprobs_; }
  int32_t cached_tokens() const { return cached_tokens_; }

 private:
  struct Choice {
    std::unique_ptr<text::Detokenizer> detokenizer;  // absent without a tokenizer
    int32_t num_tokens = 0;
    int64_t last_token_ms = -1;  // when its latest tokens arrived (inter-token latency)
    bool finished = false;
    std::string finish_reason;
  };

  Generation(ServingContext& context, GenerationRequest request, int64_t arrival_ms);
  Batch Convert(StreamBatch batch);
  void Absorb(const ChoiceOutput& out, std::vector<ChoiceEvent>* events);
  void Record(const std::string& reason);

  ServingContext& context_;
  const GenerationRequest request_;
  const RequestId id_;
  const int64_t arrival_ms_;
  std::shared_ptr<RequestStream> stream_;
  std::vector<Choice> choices_;
  std::vector<PositionLogprobs> prompt_logprobs_;
  int32_t cached_tokens_ = 0;
  int64_t first_scheduled_ms_ = -1;
  int64_t first_token_ms_ = -1;
  bool aborted_engine_ = false;
  bool recorded_ = false;
  bool done_ = false;
};

}  // namespace loom
