// The text side of a model: its tokenizer and its chat template, each optional (a model may have
// neither; token-id prompts still work). A Hugging Face model folder gives them through
// tokenizer.json / tokenizer_config.json / chat_template.jinja; a GGUF file (llama.cpp, Ollama)
// through its tokenizer metadata (gguf_text.h). Loaded once; both parts are immutable and
// thread-safe after loading.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "server/text/chat_template.h"
#include "server/text/tokenizer/tokenizer.h"

namespace loom::text {

struct ModelText {
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model has no usable tokenizer
  std::optional<ChatTemplate> chat;      // empty when it has no usable chat template
  // Why a part is missing (OK when present), for the caller to report.
  absl::Status tokenizer_status;
  absl::Status chat_status;
};

// `model_path` is a model folder, or a GGUF file (IsGgufFile: its first bytes are "GGUF").
ModelText LoadModelText(std::string_view model_path);

}  // namespace loom::text
