// libFuzzer target: arbitrary bytes are encoded with every fixture tokenizer (with and without
// special tokens), decoded again and streamed through the Detokenizer. Checks: no crash, decoded
// text is well-formed UTF-8, the streamed text equals Decode, and byte-level tokenizers without
// a normalizer give back the (sanitized) input exactly.
//
// Fixtures are read from $LOOM_SOURCE_DIR/tests/text/fixtures/tokenizers/, or, when that
// environment variable is unset, from the LOOM_SOURCE_DIR compile definition (the repository
// root).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/text/detokenizer.h"
#include "server/text/tokenizer/tokenizer.h"
#include "engine/common/utf8.h"

namespace {

struct Fixture {
  std::string style;
  std::unique_ptr<loom::text::Tokenizer> tokenizer;
  bool round_trips;  // byte-level without normalizer: Decode(Encode(x)) == x
};

std::string SourceDir() {
  if (const char* env = std::getenv("LOOM_SOURCE_DIR")) return env;
#ifdef LOOM_SOURCE_DIR
  return LOOM_SOURCE_DIR;
#else
  return ".";
#endif
}

std::vector<Fixture>& Fixtures() {
  static std::vector<Fixture>* fixtures = [] {
    auto* out = new std::vector<Fixture>();
    const struct {
      const char* style;
      bool round_trips;
    } kStyles[] = {{"llama3", true},  {"gpt2", true},     {"qwen2", false}, {"deepseek_v3", true},
                   {"llama2", false}, {"mistral", false}, {"gemma", false}, {"digits", false},
                   {"splits", false}, {"affixes", false}};
    for (const auto& s : kStyles) {
      auto tok = loom::text::Tokenizer::LoadFromDir(SourceDir() +
                                                    "/tests/text/fixtures/tokenizers/" + s.style);
      if (!tok.ok()) {
        std::fprintf(stderr, "cannot load fixture %s: %s\n", s.style,
                     std::string(tok.status().message()).c_str());
        std::abort();
      }
      out->push_back(Fixture{s.style, std::move(*tok), s.round_trips});
    }
    return out;
  }();
  return *fixtures;
}

void Check(bool ok, const char* what, const std::string& style) {
  if (ok) return;
  std::fprintf(stderr, "property violated for %s: %s\n", style.c_str(), what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  for (const Fixture& f : Fixtures()) {
    const loom::text::Tokenizer& tok = *f.tokenizer;
    const std::vector<int32_t> ids = tok.Encode(input, false);
    const std::vector<int32_t> with_special = tok.Encode(input, true);
    Check(with_special.size() >= ids.size(), "special tokens removed ids", f.style);
    for (int32_t id : with_special)
      Check(id >= 0 && id < tok.vocab_size(), "id out of range", f.style);
    const std::string decoded = tok.Decode(ids, false);
    Check(loom::IsValidUtf8(decoded), "decoded text is not UTF-8", f.style);
    if (f.round_trips) {
      Check(decoded == loom::SanitizeUtf8(input), "byte-level round trip", f.style);
    }
    loom::text::Detokenizer detok(&tok, {/*skip_special_tokens=*/true, {}});
    std::string streamed;
    for (int32_t id : with_special) streamed += detok.Add(id);
    streamed += detok.Finish();
    Check(streamed == tok.Decode(with_special, true), "streamed text differs from Decode", f.style);
  }
  return 0;
}
