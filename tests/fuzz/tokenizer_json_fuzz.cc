// libFuzzer target: arbitrary bytes as tokenizer.json (and, after a NUL byte if any, as
// tokenizer_config.json). Loading must fail with a Status or succeed; a tokenizer that loads must
// encode and decode a short string without crashing, with ids in range and UTF-8 output.
// Self-contained: needs no files.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/text/detokenizer.h"
#include "server/text/tokenizer/tokenizer.h"
#include "engine/common/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view config;
  if (const size_t nul = input.find('\0'); nul != std::string_view::npos) {
    config = input.substr(nul + 1);
    input = input.substr(0, nul);
  }
  auto tok = loom::text::Tokenizer::FromJson(input, config);
  if (!tok.ok()) return 0;
  const loom::text::Tokenizer& t = **tok;
  for (const char* text : {"Hello world 123 <s> \xC3\xBF\xE2\x82", "", "  a\n\tb"}) {
    const std::vector<int32_t> ids = t.Encode(text, true);
    for (int32_t id : ids) {
      if (id < 0 || id >= t.vocab_size()) std::abort();
    }
    if (!loom::IsValidUtf8(t.Decode(ids, false))) std::abort();
    loom::text::Detokenizer detok(&t, {true, {"wor"}});
    for (int32_t id : ids) detok.Add(id);
    detok.Finish();
  }
  std::vector<int32_t> all;
  for (int32_t id = 0; id < t.vocab_size() && id < 300; ++id) all.push_back(id);
  if (!loom::IsValidUtf8(t.Decode(all, true))) std::abort();
  return 0;
}
