#include "server/api/completions.h"

#include <algorithm>
#include <utility>

#include "engine/common/json.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/api/api_status.h"
#include "server/api/param_validation.h"
#include "server/api/completion_job.h"
#include "server/http/http_server.h"
#include "server/text/jinja/value.h"

namespace loom::api {
namespace {

// Refuses a request before it reached the engine; it counts as rejected (server_metrics.h).
void Reject(ServingContext& context, http::Responder& r, const absl::Status& s) {
  if (context.metrics != nullptr) context.metrics->ObserveRejected(s);
  r.Send(ErrorResponseFor(s, context.config.retry_after_s));
}

// Chat's `echo` (vLLM's): the content of the last message when it is the assistant's (the
// message a response continues, e.g. with continue_final_message), text parts joined by
// newlines; otherwise nothing. The messages were validated when the body was parsed.
std::string EchoedChatContent(const CompletionParams& p) {
  absl::StatusOr<Json> body = Json::Parse(p.messages_json, "request body");
  if (!body.ok()) return "";
  std::optional<Json> messages = body->Find("messages");
  if (!messages.has_value() || !messages->IsArray() || messages->size() == 0) return "";
  const Json last = (*messages)[messages->size() - 1];
  absl::StatusOr<std::string> role = last.GetString("role", "");
  std::optional<Json> content = last.Find("content");
  if (!role.ok() || *role != "assistant" || !content.has_value()) return "";
  if (content->IsString()) return *content->AsString();
  std::string joined;
  for (size_t i = 0; content->IsArray() && i < content->size(); ++i) {
    absl::StatusOr<std::string> text = (*content)[i].GetString("text", "");
    if (!text.ok()) continue;
    if (i > 0) joined += "\n";
    joined += *text;
  }
  return joined;
}

absl::StatusOr<std::vector<CompletionJob::PromptInfo>> BuildPrompts(
    const ServingContext& context, const CompletionParams& p) {
  std::vector<CompletionJob::PromptInfo> prompts;
  if (p.kind == EndpointKind::kChat) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, RenderChatPrompt(context, p));
    LOOM_RETURN_IF_ERROR(CheckTokenizedPrompt(ids, context.model.vocab_size, "messages"));
    prompts.push_back({std::move(ids), p.echo ? EchoedChatContent(p) : ""});
    return prompts;
  }
  for (const PromptInput& in : p.prompts) {
    CompletionJob::PromptInfo info;
    if (in.is_ids) {
      info.ids = in.ids;
      if (p.echo && context.tokenizer != nullptr) info.echo_text = context.tokenizer->Decode(in.ids, false);
    } else {
      if (context.tokenizer == nullptr) {
        return ParamError("prompt", "this model has no tokenizer.json; send the prompt as token ids");
      }
      info.ids = context.tokenizer->Encode(in.text, /*add_special_tokens=*/true);
      info.echo_text = in.text;
      LOOM_RETURN_IF_ERROR(CheckTokenizedPrompt(info.ids, context.model.vocab_size, "prompt"));
    }
    if (info.ids.empty()) return ParamError("prompt", "the prompt is empty");
    prompts.push_back(std::move(info));
  }
  return prompts;
}

}  // namespace

absl::StatusOr<GenerationRequest> BuildGenerationRequest(const ServingContext& context,
                                                         const CompletionParams& p,
                                                         size_t prompt_len) {
  const int64_t context_len = context.model.max_context_len;
  const char* what = p.kind == EndpointKind::kChat ? "messages" : "prompt";
  int64_t max_tokens = p.max_tokens.value_or(-1);
  if (max_tokens < 0) max_tokens = p.kind == EndpointKind::kChat ? context_len - prompt_len : 16;
  if (static_cast<int64_t>(prompt_len) + max_tokens > context_len) {
    return ParamError(what, StrCat("This model's maximum context length is ", context_len,
                                   " tokens. However, you requested ", prompt_len + max_tokens,
                                   " tokens (", prompt_len, " in the ", what, ", ", max_tokens,
                                   " in the completion). Please reduce the length."));
  }
  GenerationRequest r;
  r.max_tokens = static_cast<int32_t>(max_tokens);  // 0 only with echo: the prompt alone
  r.n = p.n;
  SamplingParams& s = r.sampling;
  s.temperature = static_cast<float>(p.temperature);
  s.top_p = static_cast<float>(p.top_p);
  s.top_k = std::max(p.top_k, 0);  // vLLM's -1 disables, as 0 does
  s.min_p = static_cast<float>(p.min_p);
  s.repetition_penalty = static_cast<float>(p.repetition_penalty);
  s.frequency_penalty = static_cast<float>(p.frequency_penalty);
  s.presence_penalty = static_cast<float>(p.presence_penalty);
  for (const auto& [id, bias] : p.logit_bias) s.logit_bias.emplace_back(TokenId(id), bias);
  s.min_tokens = p.min_tokens;
  s.logprobs = p.logprobs.value_or(-1);
  // A completion that echoes its prompt with logprobs scores the prompt's tokens too (chat's
  // echo is the last message's text, without scores).
  if (p.echo && p.kind == EndpointKind::kCompletion) s.prompt_logprobs = p.logprobs.value_or(-1);
  if (p.seed.has_value()) {
    s.seed = static_cast<uint64_t>(*p.seed);
    r.has_seed = true;
  }
  LOOM_RETURN_IF_ERROR(ValidateSamplingParams(s, context.model.vocab_size));
  r.stop = p.stop;
  r.stop_token_ids = p.stop_token_ids;
  r.ignore_eos = p.ignore_eos;
  r.skip_special_tokens = p.skip_special_tokens;
  r.include_stop_str_in_output = p.include_stop_str_in_output;
  r.priority = p.priority;
  r.cache_salt = p.cache_salt;
  if (p.timeout_s > 0) {
    r.deadline_ms = context.now_ms() + static_cast<int64_t>(p.timeout_s * 1000.0);
  }
  return r;
}

namespace {

// Content given as a list of text parts becomes one string (the parts joined by newlines), the
// form chat templates expect; validation already refused any other kind of part.
text::jinja::Value FlattenTextParts(const text::jinja::Value& messages) {
  using text::jinja::Value;
  text::jinja::ValueList out;
  for (const Value& m : messages.AsList()) {
    const Value* content = m.IsDict() ? m.AsDict().Find("content") : nullptr;
    if (content == nullptr || !content->IsList()) {
      out.push_back(m);
      continue;
    }
    std::string joined;
    for (const Value& part : content->AsList()) {
      const Value* t = part.IsDict() ? part.AsDict().Find("text") : nullptr;
      if (t == nullptr || !t->IsString()) continue;
      if (!joined.empty()) joined += "\n";
      joined += t->AsString();
    }
    auto dict = std::make_shared<text::jinja::Dict>(m.AsDict());
    dict->Set(Value::String("content"), Value::String(std::move(joined)));
    out.push_back(Value::FromDict(std::move(dict)));
  }
  return Value::List(std::move(out));
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> RenderChatPrompt(const ServingContext& context,
                                                      const CompletionParams& p) {
  if (context.tokenizer == nullptr) {
    return ParamError("messages", "this model has no tokenizer; use /v1/completions with token ids");
  }
  // A template carried by the request replaces the model's, when the operator allows that.
  std::optional<text::ChatTemplate> own;
  if (!p.chat_template.empty()) {
    if (!context.config.allow_request_chat_template) {
      return ParamError("chat_template",
                        "request chat templates are disabled on this server "
                        "(allow_request_chat_template)");
    }
    text::SpecialTokens tokens;
    if (context.chat_template.has_value()) {
      tokens = context.chat_template->special_tokens();
    } else {
      if (!context.tokenizer->bos_token().empty()) tokens.bos_token = context.tokenizer->bos_token();
      if (!context.tokenizer->eos_token().empty()) tokens.eos_token = context.tokenizer->eos_token();
    }
    absl::StatusOr<text::ChatTemplate> compiled = text::ChatTemplate::FromSource(p.chat_template, tokens);
    if (!compiled.ok()) {
      return ParamError("chat_template", StrCat("the chat template does not compile: ",
                                                compiled.status().message()));
    }
    own = std::move(*compiled);
  } else if (!context.chat_template.has_value()) {
    return ParamError("messages", "this model has no chat template; use /v1/completions");
  }
  const text::ChatTemplate& chat_template = own.has_value() ? *own : *context.chat_template;
  // Re-read the body keeping key order (tool-call arguments are printed in the client's order).
  LOOM_ASSIGN_OR_RETURN(text::jinja::Value body, text::jinja::ParseJson(p.messages_json));
  const text::jinja::Value* messages = body.IsDict() ? body.AsDict().Find("messages") : nullptr;
  if (messages == nullptr || !messages->IsList()) {
    return ParamError("messages", "'messages' must be an array");
  }
  text::ChatRenderRequest request;
  request.messages = FlattenTextParts(*messages);
  request.add_generation_prompt = p.add_generation_prompt;
  request.continue_final_message = p.continue_final_message;
  request.kwargs_json = p.chat_template_kwargs_json;
  request.options.now_unix_seconds = context.now_ms() / 1000;
  absl::StatusOr<std::string> prompt = chat_template.Render(request);
  if (!prompt.ok()) {
    return ParamError("messages", StrCat("the chat template failed: ", prompt.status().message()));
  }
  std::vector<int32_t> ids = context.tokenizer->Encode(*prompt, /*add_special_tokens=*/false);
  if (ids.empty()) return ParamError("messages", "the conversation renders to an empty prompt");
  return ids;
}

void HandleCompletion(ServingContext& context, WorkQueue& work, EndpointKind kind,
                      const http::Request& request, std::shared_ptr<http::Responder> responder) {
  const int64_t arrival = context.now_ms();
  if (context.draining.load()) {
    return Reject(context, *responder, absl::UnavailableError("the server is shutting down"));
  }
  ParseLimits limits;
  limits.vocab_size = context.model.vocab_size;
  absl::StatusOr<CompletionParams> params =
      ParseCompletionRequest(request.body, kind, limits, context.config.strict_api);
  if (!params.ok()) return Reject(context, *responder, params.status());
  if (!params->model.empty() && params->model != context.model_id) {
    return Reject(context, *responder,
                  absl::NotFoundError(StrCat("The model `", params->model,
                                             "` does not exist; this server serves `",
                                             context.model_id, "`")));
  }
  absl::StatusOr<std::vector<CompletionJob::PromptInfo>> prompts = BuildPrompts(context, *params);
  if (!prompts.ok()) return Reject(context, *responder, prompts.status());
  std::vector<GenerationRequest> requests;
  for (CompletionJob::PromptInfo& prompt : *prompts) {
    absl::StatusOr<GenerationRequest> r = BuildGenerationRequest(context, *params, prompt.ids.size());
    if (!r.ok()) return Reject(context, *responder, r.status());
    r->prompt_ids = std::move(prompt.ids);  // the job keeps only the echo text
    requests.push_back(std::move(*r));
  }
  CompletionJob::Start(context, work, std::move(*params), std::move(*prompts), std::move(requests),
                       std::move(responder), arrival);
}

}  // namespace loom::api
