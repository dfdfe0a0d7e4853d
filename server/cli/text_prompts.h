// Text for `loom generate`: prompts (--prompt) through the model's tokenizer, conversations
// (--chat) through its chat template, and generated ids back to text.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/text/model_text.h"

namespace loom::cli {

// What the model folder has (text::LoadModelText); a missing tokenizer or template is only an
// error when a prompt needs it.
using TextSupport = text::ModelText;

// Token ids of a text prompt (special tokens added as the tokenizer does).
absl::StatusOr<std::vector<int32_t>> EncodePrompt(const TextSupport& text, std::string_view prompt);

// Token ids of a conversation: `messages_json` is a JSON array of {"role", "content"} messages,
// rendered with the generation prompt.
absl::StatusOr<std::vector<int32_t>> EncodeChat(const TextSupport& text,
                                                std::string_view messages_json);

}  // namespace loom::cli
