// A model's chat template, rendered exactly as Hugging Face transformers' apply_chat_template
// renders it (tokenize=False).
//
//   LOOM_ASSIGN_OR_RETURN(ChatTemplate chat, ChatTemplate::LoadFromDir(model_dir));
//   ChatRenderRequest request;
//   request.messages_json = R"([{"role": "user", "content": "Hi"}])";
//   request.add_generation_prompt = true;
//   LOOM_ASSIGN_OR_RETURN(std::string prompt, chat.Render(request));
//
// The template sees what transformers passes: `messages`, `tools` (None when the request has
// none), `documents` (None), `add_generation_prompt`, the special tokens of tokenizer_config.json
// (bos_token, eos_token, unk_token, pad_token, when set) and the request's extra keyword
// arguments (e.g. enable_thinking), which override the tokens. JSON objects keep their key order.
//
// A ChatTemplate is immutable after loading; Render is const and safe to call from many threads
// at once. Template errors, including the template's own raise_exception(msg), are
// InvalidArgument naming line and column (and ending with msg).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/text/jinja/template.h"
#include "server/text/jinja/value.h"

namespace loom::text {

// The special-token strings a template may print.
struct SpecialTokens {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> unk_token;
  std::optional<std::string> pad_token;
};

// One render of a chat template.
struct ChatRenderRequest {
  // The conversation: `messages` when set, else the JSON array in `messages_json`.
  std::optional<jinja::Value> messages;
  std::string messages_json = "[]";
  // Tool schemas: `tools` when set, else the JSON array in `tools_json` (empty: no tools).
  std::optional<jinja::Value> tools;
  std::string tools_json;
  bool add_generation_prompt = false;
  // Leave the final (assistant) message open so the model continues it (transformers'
  // continue_final_message); incompatible with add_generation_prompt.
  bool continue_final_message = false;
  // Extra template variables: `kwargs` (a dict) when set, else the JSON object in `kwargs_json`
  // (empty: none), e.g. {"enable_thinking": false}.
  std::optional<jinja::Value> kwargs;
  std::string kwargs_json;
  // Limits, and the time strftime_now formats (RenderOptions::now_unix_seconds).
  jinja::RenderOptions options;
};

// A loaded chat template (or a default and a tool_use pair) with its special tokens.
class ChatTemplate {
 public:
  // Loads the template of a Hugging Face model folder, as transformers does: chat_template.jinja
  // if present, else chat_template.json ({"chat_template": ...}), else tokenizer_config.json's
  // chat_template (a string, or a list of {name, template}: "default" is used, and "tool_use"
  // when the request has tools). Special tokens come from tokenizer_config.json (plain strings or
  // {"content": ...} objects). NotFound when the folder has no template.
  static absl::StatusOr<ChatTemplate> LoadFromDir(std::string_view dir);

  // Compiles a template given as source text (e.g. supplied with a request, when the operator
  // allows that).
  static absl::StatusOr<ChatTemplate> FromSource(std::string_view source, SpecialTokens tokens);

  // Renders the conversation into the prompt text.
  absl::StatusOr<std::string> Render(const ChatRenderRequest& request) const;

  const SpecialTokens& special_tokens() const { return tokens_; }

 private:
  ChatTemplate() = default;

  std::shared_ptr<const jinja::Template> default_template_;
  std::shared_ptr<const jinja::Template> tool_use_template_;
  SpecialTokens tokens_;
};

}  // namespace loom::text
