// Parsing and validation of OpenAI `/v1/completions` and `/v1/chat/completions` bodies into
// plain parameters, before anything reaches the tokenizer or the scheduler.
//
// Every problem is a ParamError (400, naming the field): malformed JSON, wrong types, values out
// of range and combinations that make no sense (these rules live in param_validation.h, shared
// with the gRPC API), and features loom does not have yet
// (`response_format` json_object/json_schema, `tools`, `suffix`, `best_of` != n) — these are
// refused clearly, never silently ignored. Unknown fields are ignored unless `strict` is set,
// then they are errors. Ranges follow OpenAI where it defines them, vLLM for its extensions.
//
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::api {

enum class EndpointKind { kCompletion, kChat };

// One prompt of a completion request: text, or token ids.
struct PromptInput {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};

struct CompletionParams {
  EndpointKind kind = EndpointKind::kCompletion;
  std::string model;  // empty when the client gave none
  // kCompletion: the prompts (a batch gives one choice group per prompt).
  std::vector<PromptInput> prompts;
  // kChat: the messages array as JSON text (each an object with a string `role`), and the
  // template options.
  std::string messages_json;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::string chat_template_kwargs_json;  // a JSON object or ""
  // Unset: 16 for completions, the rest of the context for chat.
  std::optional<int32_t> max_tokens;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Sampling.
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = 0;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  std::optional<int64_t> seed;
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Unset: none; k >= 0: the sampled token's log-probability and the k most likely.
  std::optional<int32_t> logprobs;
  // kCompletion: the prompt (and, with logprobs, its tokens' scores) is prepended to the output;
  // then max_tokens may be 0 (score the prompt, generate nothing). kChat: the last message's
  // content is, when it is the assistant's.
  bool echo = false;
  // Stopping.
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t min_tokens = 0;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  // Scheduling.
  int32_t priority = 0;
  std::string cache_salt;
  // Seconds the request may take from arrival; past it, it ends with finish_reason "deadline"
  // (0 = none). A loom extension.
  double timeout_s = 0;
  // kChat: a Jinja chat template carried by the request (only when the operator allows it).
  std::string chat_template;
  std::string user;
  std::string request_id;  // the client's, when it gave one (see IsValidRequestId)
};

struct ParseLimits {
  int32_t vocab_size = 0;  // token ids (prompt, stop_token_ids, logit_bias) must be below it
  int32_t max_n = 128;
  int32_t max_stop_strings = 16;
  int32_t max_stop_string_bytes = 1024;
  int32_t max_logit_bias_entries = 1024;
  int32_t max_prompts = 1024;
};

absl::StatusOr<CompletionParams> ParseCompletionRequest(std::string_view body, EndpointKind kind,
                                                        const ParseLimits& limits, bool strict);

// POST /tokenize: {"prompt": "...", "add_special_tokens": bool} or a chat's {"messages": [...],
// "add_generation_prompt": bool, ...}, whose messages are checked as for chat completions.
struct TokenizeParams {
  bool is_chat = false;
  std::string prompt;               // !is_chat
  bool add_special_tokens = true;   // !is_chat
  CompletionParams chat;            // is_chat: kind kChat with the messages and template options
};
absl::StatusOr<TokenizeParams> ParseTokenizeRequest(std::string_view body);

// POST /detokenize: {"tokens": [ids]}, each id in [0, vocab_size).
absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(std::string_view body,
                                                            int32_t vocab_size);

}  // namespace loom::api
