#include "server/text/chat_template.h"

#include "engine/common/file.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom::text {
namespace {

using jinja::Value;

std::string JoinPath(std::string_view dir, std::string_view name) {
  std::string path(dir);
  if (!path.empty() && path.back() != '/') path.push_back('/');
  path.append(name);
  return path;
}

absl::StatusOr<Value> ReadJsonFile(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(path, int64_t{64} << 20));
  absl::StatusOr<Value> value = jinja::ParseJson(text);
  if (!value.ok()) {
    return absl::InvalidArgumentError(StrCat(path, ": ", value.status().message()));
  }
  return value;
}

// A special token from tokenizer_config.json: a string or an AddedToken object.
std::optional<std::string> TokenString(const Value& config, std::string_view key) {
  if (!config.IsDict()) return std::nullopt;
  const Value* v = config.AsDict().Find(key);
  if (v == nullptr) return std::nullopt;
  if (v->IsString()) return v->AsString();
  if (v->IsDict()) {
    const Value* content = v->AsDict().Find("content");
    if (content != nullptr && content->IsString()) return content->AsString();
  }
  return std::nullopt;
}

absl::StatusOr<std::shared_ptr<const jinja::Template>> Compile(std::string_view source) {
  LOOM_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(source));
  return std::make_shared<const jinja::Template>(std::move(t));
}

absl::StatusOr<Value> ParseOptionalJson(const std::string& text, std::string_view what) {
  if (text.empty()) return Value();
  absl::StatusOr<Value> value = jinja::ParseJson(text);
  if (!value.ok()) return absl::InvalidArgumentError(StrCat(what, ": ", value.status().message()));
  return value;
}

// transformers' continue_final_message: cut the rendered text right after the final message's
// content so the model continues it.
absl::StatusOr<std::string> ContinueFinalMessage(std::string rendered, const Value& messages) {
  if (!messages.IsSequence() || messages.AsList().empty() || !messages.AsList().back().IsDict()) {
    return absl::InvalidArgumentError("continue_final_message needs a final message");
  }
  const Value* content = messages.AsList().back().AsDict().Find("content");
  std::string final_text;
  if (content != nullptr && content->IsString()) {
    final_text = content->AsString();
  } else if (content != nullptr && content->IsSequence()) {
    bool found = false;
    for (auto it = content->AsList().rbegin(); it != content->AsList().rend() && !found; ++it) {
      const Value* text = it->IsDict() ? it->AsDict().Find("text") : nullptr;
      if (text != nullptr && text->IsString()) {
        final_text = text->AsString();
        found = true;
      }
    }
    if (!found) return absl::InvalidArgumentError("continue_final_message: the final message has no text");
  }
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  size_t begin = 0;
  size_t end = final_text.size();
  while (begin < end && is_space(final_text[begin])) ++begin;
  while (end > begin && is_space(final_text[end - 1])) --end;
  const std::string stripped = final_text.substr(begin, end - begin);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos) {
    return absl::InvalidArgumentError(
        "continue_final_message is set but the final message does not appear in the chat after "
        "applying the chat template");
  }
  const size_t lstripped_len = final_text.size() - begin;
  if (rendered.compare(at, lstripped_len, final_text) == 0) {
    rendered.resize(at + lstripped_len);
  } else {
    rendered.resize(at + stripped.size());
  }
  return rendered;
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::LoadFromDir(std::string_view dir) {
  ChatTemplate chat;
  const std::string config_path = JoinPath(dir, "tokenizer_config.json");
  Value config;
  if (FileExists(config_path)) {
    LOOM_ASSIGN_OR_RETURN(config, ReadJsonFile(config_path));
  }
  chat.tokens_.bos_token = TokenString(config, "bos_token");
  chat.tokens_.eos_token = TokenString(config, "eos_token");
  chat.tokens_.unk_token = TokenString(config, "unk_token");
  chat.tokens_.pad_token = TokenString(config, "pad_token");

  const std::string jinja_path = JoinPath(dir, "chat_template.jinja");
  const std::string json_path = JoinPath(dir, "chat_template.json");
  Value source;
  std::string origin;
  if (FileExists(jinja_path)) {
    LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(jinja_path, int64_t{16} << 20));
    source = Value::String(std::move(text));
    origin = jinja_path;
  } else if (FileExists(json_path)) {
    LOOM_ASSIGN_OR_RETURN(Value json, ReadJsonFile(json_path));
    const Value* t = json.IsDict() ? json.AsDict().Find("chat_template") : nullptr;
    if (t != nullptr) source = *t;
    origin = json_path;
  } else if (config.IsDict() && config.AsDict().Find("chat_template") != nullptr) {
    source = *config.AsDict().Find("chat_template");
    origin = config_path;
  }
  if (source.IsUndefined() || source.IsNone()) {
    return absl::NotFoundError(StrCat("no chat template in ", dir,
                                      " (looked for chat_template.jinja, chat_template.json and "
                                      "tokenizer_config.json's chat_template)"));
  }
  if (source.IsString()) {
    absl::StatusOr<std::shared_ptr<const jinja::Template>> t = Compile(source.AsString());
    if (!t.ok()) return absl::InvalidArgumentError(StrCat(origin, ": ", t.status().message()));
    chat.default_template_ = *std::move(t);
    return chat;
  }
  if (!source.IsSequence()) {
    return absl::InvalidArgumentError(StrCat(origin, ": chat_template must be a string or a list"));
  }
  for (const Value& entry : source.AsList()) {
    const Value* name = entry.IsDict() ? entry.AsDict().Find("name") : nullptr;
    const Value* text = entry.IsDict() ? entry.AsDict().Find("template") : nullptr;
    if (name == nullptr || text == nullptr || !name->IsString() || !text->IsString()) {
      return absl::InvalidArgumentError(StrCat(origin, ": chat_template entries need a name and a template"));
    }
    if (name->AsString() != "default" && name->AsString() != "tool_use") continue;
    absl::StatusOr<std::shared_ptr<const jinja::Template>> t = Compile(text->AsString());
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          StrCat(origin, " (template '", name->AsString(), "'): ", t.status().message()));
    }
    (name->AsString() == "default" ? chat.default_template_ : chat.tool_use_template_) = *std::move(t);
  }
  if (chat.default_template_ == nullptr && chat.tool_use_template_ == nullptr) {
    return absl::NotFoundError(StrCat(origin, ": no chat template named 'default' or 'tool_use'"));
  }
  return chat;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromSource(std::string_view source, SpecialTokens tokens) {
  ChatTemplate chat;
  LOOM_ASSIGN_OR_RETURN(chat.default_template_, Compile(source));
  chat.tokens_ = std::move(tokens);
  return chat;
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatRenderRequest& request) const {
  if (request.add_generation_prompt && request.continue_final_message) {
    return absl::InvalidArgumentError(
        "continue_final_message and add_generation_prompt are not compatible");
  }
  Value messages;
  if (request.messages) {
    messages = *request.messages;
  } else {
    LOOM_ASSIGN_OR_RETURN(messages, ParseOptionalJson(request.messages_json, "messages"));
  }
  Value tools;
  if (request.tools) {
    tools = *request.tools;
  } else {
    LOOM_ASSIGN_OR_RETURN(tools, ParseOptionalJson(request.tools_json, "tools"));
  }
  Value kwargs;
  if (request.kwargs) {
    kwargs = *request.kwargs;
  } else {
    LOOM_ASSIGN_OR_RETURN(kwargs, ParseOptionalJson(request.kwargs_json, "template kwargs"));
  }
  if (!kwargs.IsUndefined() && !kwargs.IsDict()) {
    return absl::InvalidArgumentError("template kwargs must be a JSON object");
  }
  const bool has_tools = !tools.IsUndefined() && !tools.IsNone();
  const jinja::Template* t = has_tools && tool_use_template_ ? tool_use_template_.get() : default_template_.get();
  if (t == nullptr) {
    return absl::InvalidArgumentError("this model has multiple chat templates and no default");
  }
  auto context = std::make_shared<jinja::Dict>();
  context->Set(Value::String("messages"), messages);
  context->Set(Value::String("tools"), has_tools ? tools : Value::None());
  context->Set(Value::String("documents"), Value::None());
  context->Set(Value::String("add_generation_prompt"), Value::Bool(request.add_generation_prompt));
  const std::pair<const char*, const std::optional<std::string>*> tokens[] = {
      {"bos_token", &tokens_.bos_token},
      {"eos_token", &tokens_.eos_token},
      {"unk_token", &tokens_.unk_token},
      {"pad_token", &tokens_.pad_token},
  };
  for (const auto& [name, token] : tokens) {
    if (token->has_value()) context->Set(Value::String(name), Value::String(**token));
  }
  if (kwargs.IsDict()) {
    for (const auto& [key, value] : kwargs.AsDict().items) context->Set(key, value);
  }
  LOOM_ASSIGN_OR_RETURN(std::string rendered, t->Render(Value::FromDict(context), request.options));
  if (request.continue_final_message) return ContinueFinalMessage(std::move(rendered), messages);
  return rendered;
}

}  // namespace loom::text
