// libFuzzer target for the GGUF metadata -> tokenizer and chat template conversion
// (server/text/gguf_vocab.h, gguf_text.h): arbitrary bytes as a .gguf file. Whatever the
// metadata says (ids past the vocabulary, merges naming missing tokens, odd token types, huge
// score tables, templates that do not compile), building must fail with a Status or succeed, and
// a tokenizer that builds must encode and decode without crashing: decoding what it encoded
// gives well-formed UTF-8. The seeds are the small fixture files of tests/text/fixtures/gguf/.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/common/utf8.h"
#include "engine/weights/gguf.h"
#include "server/text/gguf_text.h"
#include "server/text/gguf_vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = loom::GgufFile::Parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) return 0;
  absl::StatusOr<loom::text::GgufVocab> vocab = loom::text::ReadGgufVocab(**file);
  if (!vocab.ok()) return 0;
  std::vector<std::string> warnings;
  auto tokenizer = loom::text::TokenizerFromGguf(*vocab, &warnings);
  if (tokenizer.ok()) {
    for (const char* text : {"Hello world", "  <s>x</s> 12345 \xC3\xA9\xF0\x9F\x98\x80\n\t", ""}) {
      const std::vector<int32_t> ids = (*tokenizer)->Encode(text, /*add_special_tokens=*/true);
      for (int32_t id : ids) {
        if (id < 0 || id >= (*tokenizer)->vocab_size()) std::abort();
      }
      if (!loom::IsValidUtf8((*tokenizer)->Decode(ids, /*skip_special_tokens=*/false))) std::abort();
    }
  }
  auto chat = loom::text::ChatTemplateFromGguf(*vocab);
  if (chat.ok()) {
    loom::text::ChatRenderRequest request;
    request.messages_json = R"([{"role": "user", "content": "hi"}])";
    request.add_generation_prompt = true;
    (void)chat->Render(request);
  }
  return 0;
}
