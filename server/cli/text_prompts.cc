#include "server/cli/text_prompts.h"

#include <ctime>
#include <string>

#include "absl/status/status.h"
#include "engine/common/strings.h"

namespace loom::cli {

namespace {

// Why `text` has no tokenizer, for a `flag` that needs one: a folder without tokenizer.json
// (NotFound, or nothing tried) is told apart from one whose tokenizer.json failed to load.
std::string NoTokenizerReason(const TextSupport& text, std::string_view flag,
                              std::string_view missing) {
  if (text.tokenizer_status.ok() || absl::IsNotFound(text.tokenizer_status)) {
    return StrCat(flag, ": the model folder has no tokenizer.json", missing);
  }
  return StrCat(flag, ": the model folder's tokenizer.json could not be loaded: ",
                text.tokenizer_status.message());
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> EncodePrompt(const TextSupport& text, std::string_view prompt) {
  if (text.tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        StrCat(NoTokenizerReason(text, "--prompt", ""), "; pass --prompt-ids"));
  }
  std::vector<int32_t> ids = text.tokenizer->Encode(prompt, /*add_special_tokens=*/true);
  if (ids.empty()) return absl::InvalidArgumentError("--prompt: the prompt encodes to no tokens");
  return ids;
}

absl::StatusOr<std::vector<int32_t>> EncodeChat(const TextSupport& text,
                                                std::string_view messages_json) {
  if (text.tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        NoTokenizerReason(text, "--chat", " or no chat template"));
  }
  if (!text.chat.has_value()) {
    return absl::FailedPreconditionError(
        "--chat: the model folder has no tokenizer.json or no chat template");
  }
  text::ChatRenderRequest request;
  request.messages_json = std::string(messages_json);
  request.add_generation_prompt = true;
  request.options.now_unix_seconds = static_cast<int64_t>(std::time(nullptr));
  absl::StatusOr<std::string> rendered = text.chat->Render(request);
  if (!rendered.ok()) {
    return absl::InvalidArgumentError(StrCat("--chat: ", rendered.status().message()));
  }
  // The template already wrote the special tokens it wants.
  return text.tokenizer->Encode(*rendered, /*add_special_tokens=*/false);
}

}  // namespace loom::cli
