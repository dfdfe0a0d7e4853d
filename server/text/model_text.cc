#include "server/text/model_text.h"

#include <string>
#include <utility>

#include "engine/weights/gguf.h"
#include "server/text/gguf_text.h"

namespace loom::text {

ModelText LoadModelText(std::string_view model_path) {
  ModelText t;
  const std::string path(model_path);
  if (IsGgufFile(path)) {
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
    if (!file.ok()) {
      t.tokenizer_status = file.status();
      t.chat_status = file.status();
      return t;
    }
    return ModelTextFromGguf(**file);
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::LoadFromDir(model_path);
  if (tokenizer.ok()) {
    t.tokenizer = std::move(*tokenizer);
  } else {
    t.tokenizer_status = tokenizer.status();
  }
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::LoadFromDir(model_path);
  if (chat.ok()) {
    t.chat = std::move(*chat);
  } else {
    t.chat_status = chat.status();
  }
  return t;
}

}  // namespace loom::text
