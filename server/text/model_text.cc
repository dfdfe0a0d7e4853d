#include "server/text/model_text.h"

#include <utility>

namespace loom::text {

ModelText LoadModelText(std::string_view model_dir) {
  ModelText t;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::LoadFromDir(model_dir);
  if (tokenizer.ok()) {
    t.tokenizer = std::move(*tokenizer);
  } else {
    t.tokenizer_status = tokenizer.status();
  }
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::LoadFromDir(model_dir);
  if (chat.ok()) {
    t.chat = std::move(*chat);
  } else {
    t.chat_status = chat.status();
  }
  return t;
}

}  // namespace loom::text
