// The text side of a Hugging Face model folder: its tokenizer and its chat template, each
// optional (a folder may have neither; token-id prompts still work). Loaded once; both parts are
// immutable and thread-safe after loading.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "server/text/chat_template.h"
#include "server/text/tokenizer/tokenizer.h"

namespace loom::text {

struct ModelText {
  std::unique_ptr<Tokenizer> tokenizer;  // null when the folder has no usable tokenizer.json
  std::optional<ChatTemplate> chat;      // empty when it has no usable chat template
  // Why a part is missing (OK when present), for the caller to report.
  absl::Status tokenizer_status;
  absl::Status chat_status;
};

ModelText LoadModelText(std::string_view model_dir);

}  // namespace loom::text
