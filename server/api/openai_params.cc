#include "server/api/openai_params.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "engine/common/json.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/api/api_status.h"
#include "server/api/param_validation.h"

namespace loom::api {
namespace {

// Fields each endpoint understands (anything else is ignored, or refused in strict mode).
const absl::flat_hash_set<std::string_view>& KnownFields(EndpointKind kind) {
  static const auto* completion = new absl::flat_hash_set<std::string_view>{
      "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stream",
      "stream_options", "logprobs", "echo", "stop", "stop_token_ids", "presence_penalty",
      "frequency_penalty", "repetition_penalty", "best_of", "logit_bias", "user", "seed",
      "suffix", "ignore_eos", "min_tokens", "priority", "skip_special_tokens",
      "include_stop_str_in_output", "cache_salt", "request_id", "response_format", "timeout"};
  static const auto* chat = new absl::flat_hash_set<std::string_view>{
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
      "top_k", "min_p", "n", "stream", "stream_options", "logprobs", "top_logprobs", "stop",
      "stop_token_ids", "presence_penalty", "frequency_penalty", "repetition_penalty",
      "logit_bias", "user", "seed", "ignore_eos", "min_tokens", "priority",
      "skip_special_tokens", "include_stop_str_in_output", "cache_salt", "request_id",
      "response_format", "tools", "tool_choice", "parallel_tool_calls", "add_generation_prompt",
      "continue_final_message", "chat_template_kwargs", "echo", "timeout", "chat_template"};
  return kind == EndpointKind::kChat ? *chat : *completion;
}

// Optional members: absent or null keeps the default. These check the JSON type and that a value
// fits its field; the ranges of values are ValidateParams' (param_validation.h).
absl::Status OptNumber(const Json& obj, std::string_view key, double* out) {
  std::optional<Json> v = obj.Find(key);
  if (!v.has_value() || v->IsNull()) return absl::OkStatus();
  if (!v->IsNumber() || v->IsBool()) return ParamError(key, StrCat("'", key, "' must be a number"));
  *out = *v->AsDouble();
  return absl::OkStatus();
}

template <typename Int>
absl::Status OptInt(const Json& obj, std::string_view key, int64_t lo, int64_t hi, Int* out) {
  std::optional<Json> v = obj.Find(key);
  if (!v.has_value() || v->IsNull()) return absl::OkStatus();
  if (!v->IsInteger() || v->IsBool()) {
    return ParamError(key, StrCat("'", key, "' must be an integer"));
  }
  absl::StatusOr<int64_t> i = v->AsInt();
  if (!i.ok() || *i < lo || *i > hi) {
    return ParamError(key, StrCat("'", key, "' must be in [", lo, ", ", hi, "]"));
  }
  *out = static_cast<Int>(*i);
  return absl::OkStatus();
}

// An integer that must fit `Int`; its range of values is checked later.
template <typename Int>
absl::Status OptInt(const Json& obj, std::string_view key, Int* out) {
  return OptInt(obj, key, std::numeric_limits<Int>::min(), std::numeric_limits<Int>::max(), out);
}

absl::Status OptInt(const Json& obj, std::string_view key, std::optional<int32_t>* out) {
  std::optional<Json> v = obj.Find(key);
  if (!v.has_value() || v->IsNull()) return absl::OkStatus();
  int32_t value = 0;
  LOOM_RETURN_IF_ERROR(OptInt(obj, key, &value));
  *out = value;
  return absl::OkStatus();
}

absl::Status OptBool(const Json& obj, std::string_view key, bool* out) {
  std::optional<Json> v = obj.Find(key);
  if (!v.has_value() || v->IsNull()) return absl::OkStatus();
  if (!v->IsBool()) return ParamError(key, StrCat("'", key, "' must be a boolean"));
  *out = *v->AsBool();
  return absl::OkStatus();
}

absl::Status OptString(const Json& obj, std::string_view key, std::string* out) {
  std::optional<Json> v = obj.Find(key);
  if (!v.has_value() || v->IsNull()) return absl::OkStatus();
  if (!v->IsString()) return ParamError(key, StrCat("'", key, "' must be a string"));
  *out = *v->AsString();
  return absl::OkStatus();
}

absl::StatusOr<int32_t> TokenId(const Json& v, std::string_view param, int32_t vocab) {
  if (!v.IsInteger() || v.IsBool()) return ParamError(param, "token ids must be integers");
  // Integers beyond int64 (e.g. 2^63) are an error of AsInt, not a crash.
  absl::StatusOr<int64_t> parsed = v.AsInt();
  if (!parsed.ok()) {
    return ParamError(param, StrCat("token id is outside the vocabulary [0, ", vocab, ")"));
  }
  // Only whether it fits an int32 here; the vocabulary bound is ValidateParams'.
  const int64_t id = *parsed;
  if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
    return ParamError(param, StrCat("token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
  }
  return static_cast<int32_t>(id);
}

absl::StatusOr<std::vector<int32_t>> TokenIds(const Json& arr, std::string_view param,
                                              int32_t vocab) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < arr.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(int32_t id, TokenId(arr[i], param, vocab));
    ids.push_back(id);
  }
  return ids;
}

absl::Status ParsePrompt(const Json& body, const ParseLimits& limits, CompletionParams* p) {
  std::optional<Json> prompt = body.Find("prompt");
  if (!prompt.has_value() || prompt->IsNull()) return ParamError("prompt", "'prompt' is required");
  const auto add_text = [&](std::string text) {
    p->prompts.push_back(PromptInput{std::move(text), {}, false});
  };
  if (prompt->IsString()) {
    add_text(*prompt->AsString());
    return absl::OkStatus();
  }
  if (!prompt->IsArray() || prompt->size() == 0) {
    return ParamError("prompt", "'prompt' must be a string, an array of strings, an array of token "
                                "ids, or an array of arrays of token ids, and not empty");
  }
  if ((*prompt)[0].IsInteger()) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenIds(*prompt, "prompt", limits.vocab_size));
    p->prompts.push_back(PromptInput{{}, std::move(ids), true});
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(prompt->size()) > limits.max_prompts) {
    return ParamError("prompt", StrCat("at most ", limits.max_prompts, " prompts per request"));
  }
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json item = (*prompt)[i];
    if (item.IsString()) {
      add_text(*item.AsString());
    } else if (item.IsArray() && item.size() > 0) {
      LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenIds(item, "prompt", limits.vocab_size));
      p->prompts.push_back(PromptInput{{}, std::move(ids), true});
    } else {
      return ParamError("prompt", "each prompt must be a string or a non-empty array of token ids");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseMessages(const Json& body, std::string_view raw, CompletionParams* p) {
  std::optional<Json> messages = body.Find("messages");
  if (!messages.has_value() || !messages->IsArray() || messages->size() == 0) {
    return ParamError("messages", "'messages' must be a non-empty array");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json m = (*messages)[i];
    const std::string where = StrCat("messages[", i, "]");
    if (!m.IsObject()) return ParamError(where, StrCat(where, " must be an object"));
    std::optional<Json> role = m.Find("role");
    if (!role.has_value() || !role->IsString()) {
      return ParamError(where, StrCat(where, ".role must be a string"));
    }
    std::optional<Json> content = m.Find("content");
    if (!content.has_value() || content->IsNull() || content->IsString()) continue;
    if (!content->IsArray()) {
      return ParamError(where, StrCat(where, ".content must be a string, null or an array of parts"));
    }
    for (size_t k = 0; k < content->size(); ++k) {
      const Json part = (*content)[k];
      absl::StatusOr<std::string> type = part.GetString("type", "");
      if (!type.ok() || *type != "text" || !part.Find("text").has_value() ||
          !part.Find("text")->IsString()) {
        return ParamError(where, StrCat(where, ".content[", k,
                                        "]: only parts of type 'text' with a string 'text' are "
                                        "supported"));
      }
    }
  }
  p->messages_json = std::string(raw);  // the chat layer re-reads it with key order kept
  LOOM_RETURN_IF_ERROR(OptBool(body, "add_generation_prompt", &p->add_generation_prompt));
  LOOM_RETURN_IF_ERROR(OptBool(body, "continue_final_message", &p->continue_final_message));
  if (p->add_generation_prompt && p->continue_final_message) {
    // Only refuse when both were asked for explicitly.
    std::optional<Json> agp = body.Find("add_generation_prompt");
    if (agp.has_value() && !agp->IsNull()) {
      return ParamError("continue_final_message",
                        "'continue_final_message' and 'add_generation_prompt' exclude each other");
    }
    p->add_generation_prompt = false;
  }
  if (std::optional<Json> kw = body.Find("chat_template_kwargs"); kw.has_value() && !kw->IsNull()) {
    if (!kw->IsObject()) {
      return ParamError("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    }
    p->chat_template_kwargs_json = kw->Dump();
  }
  // Frameworks send an empty tool list (with tool_choice "none") when they have no tools: that
  // asks for nothing, so it is accepted. Tools themselves are not supported yet.
  if (std::optional<Json> tools = body.Find("tools"); tools.has_value() && !tools->IsNull()) {
    if (!tools->IsArray()) return ParamError("tools", "'tools' must be an array");
    if (tools->size() > 0) return ParamError("tools", "'tools' is not supported yet");
  }
  if (std::optional<Json> choice = body.Find("tool_choice"); choice.has_value() && !choice->IsNull()) {
    const bool no_tool = choice->IsString() && (*choice->AsString() == "none" ||
                                                *choice->AsString() == "auto");
    if (!no_tool) {
      return ParamError("tool_choice",
                        "'tool_choice' other than \"none\" or \"auto\" needs tools, which are not "
                        "supported yet");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const Json& body, const ParseLimits& limits, CompletionParams* p) {
  std::optional<Json> stop = body.Find("stop");
  if (stop.has_value() && !stop->IsNull()) {
    if (stop->IsString()) {
      p->stop.push_back(*stop->AsString());
    } else if (stop->IsArray()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].IsString()) return ParamError("stop", "'stop' entries must be strings");
        p->stop.push_back(*(*stop)[i].AsString());
      }
    } else {
      return ParamError("stop", "'stop' must be a string or an array of strings");
    }
  }
  std::optional<Json> ids = body.Find("stop_token_ids");
  if (ids.has_value() && !ids->IsNull()) {
    if (!ids->IsArray()) return ParamError("stop_token_ids", "'stop_token_ids' must be an array");
    LOOM_ASSIGN_OR_RETURN(p->stop_token_ids,
                          TokenIds(*ids, "stop_token_ids", limits.vocab_size));
  }
  return absl::OkStatus();
}

absl::Status ParseLogitBias(const Json& body, const ParseLimits& limits, CompletionParams* p) {
  std::optional<Json> bias = body.Find("logit_bias");
  if (!bias.has_value() || bias->IsNull()) return absl::OkStatus();
  if (!bias->IsObject()) return ParamError("logit_bias", "'logit_bias' must be an object");
  for (const auto& [key, value] : bias->Items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < std::numeric_limits<int32_t>::min() ||
        id > std::numeric_limits<int32_t>::max()) {
      return ParamError("logit_bias", StrCat("logit_bias key '", key,
                                             "' is not a token id in [0, ", limits.vocab_size, ")"));
    }
    if (!value.IsNumber() || value.IsBool()) {
      return ParamError("logit_bias", "logit_bias values must be numbers in [-100, 100]");
    }
    p->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(*value.AsDouble()));
  }
  return absl::OkStatus();
}

absl::Status ParseLogprobs(const Json& body, EndpointKind kind, CompletionParams* p) {
  if (kind == EndpointKind::kCompletion) {
    return OptInt(body, "logprobs", &p->logprobs);
  }
  bool want = false;
  LOOM_RETURN_IF_ERROR(OptBool(body, "logprobs", &want));
  int32_t top = 0;
  LOOM_RETURN_IF_ERROR(OptInt(body, "top_logprobs", &top));
  std::optional<Json> top_given = body.Find("top_logprobs");
  if (!want && top_given.has_value() && !top_given->IsNull() && top > 0) {
    return ParamError("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  if (want) p->logprobs = top;
  return absl::OkStatus();
}

absl::Status ParseUnsupported(const Json& body, EndpointKind kind, CompletionParams* p) {
  if (std::optional<Json> rf = body.Find("response_format"); rf.has_value() && !rf->IsNull()) {
    absl::StatusOr<std::string> type = rf->IsObject() ? rf->GetString("type", "text")
                                                      : absl::StatusOr<std::string>("?");
    if (!type.ok() || *type != "text") {
      return ParamError("response_format",
                        "'response_format' other than {\"type\": \"text\"} is not supported yet");
    }
  }
  if (std::optional<Json> s = body.Find("suffix"); s.has_value() && !s->IsNull()) {
    return ParamError("suffix", "'suffix' is not supported");
  }
  if (std::optional<Json> b = body.Find("best_of"); b.has_value() && !b->IsNull()) {
    int32_t best_of = p->n;
    LOOM_RETURN_IF_ERROR(OptInt(body, "best_of", 1, 128, &best_of));
    if (best_of != p->n) return ParamError("best_of", "'best_of' must equal 'n' (or be omitted)");
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const Json& body, CompletionParams* p) {
  LOOM_RETURN_IF_ERROR(OptNumber(body, "temperature", &p->temperature));
  LOOM_RETURN_IF_ERROR(OptNumber(body, "top_p", &p->top_p));
  LOOM_RETURN_IF_ERROR(OptInt(body, "top_k", &p->top_k));
  LOOM_RETURN_IF_ERROR(OptNumber(body, "min_p", &p->min_p));
  LOOM_RETURN_IF_ERROR(OptNumber(body, "repetition_penalty", &p->repetition_penalty));
  LOOM_RETURN_IF_ERROR(OptNumber(body, "frequency_penalty", &p->frequency_penalty));
  LOOM_RETURN_IF_ERROR(OptNumber(body, "presence_penalty", &p->presence_penalty));
  int64_t seed = 0;
  if (std::optional<Json> s = body.Find("seed"); s.has_value() && !s->IsNull()) {
    LOOM_RETURN_IF_ERROR(OptInt(body, "seed", INT64_MIN, INT64_MAX, &seed));
    p->seed = seed;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CompletionParams> ParseCompletionRequest(std::string_view raw, EndpointKind kind,
                                                        const ParseLimits& limits, bool strict) {
  absl::StatusOr<Json> parsed = Json::Parse(raw, "request body");
  if (!parsed.ok()) return ParamError("", StrCat("the body is not valid JSON: ", parsed.status().message()));
  const Json& body = *parsed;
  if (!body.IsObject()) return ParamError("", "the body must be a JSON object");
  if (strict) {
    for (const auto& [key, value] : body.Items()) {
      if (!KnownFields(kind).contains(key)) {
        return ParamError(key, StrCat("unknown field '", key, "' (strict API mode)"));
      }
    }
  }
  CompletionParams p;
  p.kind = kind;
  LOOM_RETURN_IF_ERROR(OptString(body, "model", &p.model));
  if (kind == EndpointKind::kCompletion) {
    LOOM_RETURN_IF_ERROR(ParsePrompt(body, limits, &p));
  } else {
    LOOM_RETURN_IF_ERROR(ParseMessages(body, raw, &p));
  }
  LOOM_RETURN_IF_ERROR(OptBool(body, "echo", &p.echo));
  LOOM_RETURN_IF_ERROR(OptInt(body, "max_tokens", &p.max_tokens));
  ParamNames names;
  if (kind == EndpointKind::kChat) {
    names.logprobs = "top_logprobs";
    std::optional<Json> mct = body.Find("max_completion_tokens");
    if (mct.has_value() && !mct->IsNull()) names.max_tokens = "max_completion_tokens";
    LOOM_RETURN_IF_ERROR(OptInt(body, "max_completion_tokens", &p.max_tokens));
  }
  LOOM_RETURN_IF_ERROR(OptInt(body, "n", &p.n));
  LOOM_RETURN_IF_ERROR(OptBool(body, "stream", &p.stream));
  if (std::optional<Json> so = body.Find("stream_options"); so.has_value() && !so->IsNull()) {
    if (!so->IsObject()) return ParamError("stream_options", "'stream_options' must be an object");
    if (!p.stream) return ParamError("stream_options", "'stream_options' needs 'stream': true");
    LOOM_RETURN_IF_ERROR(OptBool(*so, "include_usage", &p.include_usage));
  }
  LOOM_RETURN_IF_ERROR(ParseSampling(body, &p));
  LOOM_RETURN_IF_ERROR(ParseLogitBias(body, limits, &p));
  LOOM_RETURN_IF_ERROR(ParseLogprobs(body, kind, &p));
  LOOM_RETURN_IF_ERROR(ParseStop(body, limits, &p));
  LOOM_RETURN_IF_ERROR(OptBool(body, "ignore_eos", &p.ignore_eos));
  LOOM_RETURN_IF_ERROR(OptInt(body, "min_tokens", &p.min_tokens));
  LOOM_RETURN_IF_ERROR(OptBool(body, "include_stop_str_in_output", &p.include_stop_str_in_output));
  LOOM_RETURN_IF_ERROR(OptBool(body, "skip_special_tokens", &p.skip_special_tokens));
  LOOM_RETURN_IF_ERROR(OptInt(body, "priority", &p.priority));
  LOOM_RETURN_IF_ERROR(OptString(body, "cache_salt", &p.cache_salt));
  LOOM_RETURN_IF_ERROR(OptNumber(body, "timeout", &p.timeout_s));
  if (kind == EndpointKind::kChat) {
    LOOM_RETURN_IF_ERROR(OptString(body, "chat_template", &p.chat_template));
  }
  LOOM_RETURN_IF_ERROR(OptString(body, "user", &p.user));
  LOOM_RETURN_IF_ERROR(OptString(body, "request_id", &p.request_id));
  LOOM_RETURN_IF_ERROR(ParseUnsupported(body, kind, &p));
  LOOM_RETURN_IF_ERROR(ValidateParams(p, limits, names));
  return p;
}

absl::StatusOr<TokenizeParams> ParseTokenizeRequest(std::string_view raw) {
  absl::StatusOr<Json> parsed = Json::Parse(raw, "request body");
  if (!parsed.ok() || !parsed->IsObject()) return ParamError("", "the body must be a JSON object");
  const Json& body = *parsed;
  TokenizeParams t;
  if (body.Has("messages")) {
    t.is_chat = true;
    t.chat.kind = EndpointKind::kChat;
    LOOM_RETURN_IF_ERROR(ParseMessages(body, raw, &t.chat));
    return t;
  }
  std::optional<Json> prompt = body.Find("prompt");
  if (!prompt.has_value() || !prompt->IsString()) {
    return ParamError("prompt", "'prompt' must be a string");
  }
  t.prompt = *prompt->AsString();
  LOOM_RETURN_IF_ERROR(OptBool(body, "add_special_tokens", &t.add_special_tokens));
  return t;
}

absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(std::string_view raw,
                                                            int32_t vocab_size) {
  absl::StatusOr<Json> parsed = Json::Parse(raw, "request body");
  if (!parsed.ok() || !parsed->IsObject()) return ParamError("", "the body must be a JSON object");
  std::optional<Json> tokens = parsed->Find("tokens");
  if (!tokens.has_value() || !tokens->IsArray()) {
    return ParamError("tokens", "'tokens' must be an array of token ids");
  }
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json item = (*tokens)[i];
    absl::StatusOr<int64_t> id = item.IsBool() ? absl::StatusOr<int64_t>(-1) : item.AsInt();
    if (!id.ok() || *id < 0 || *id >= vocab_size) {
      return ParamError("tokens", StrCat("token ids must be integers in [0, ", vocab_size, ")"));
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

}  // namespace loom::api
