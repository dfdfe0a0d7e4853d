// libFuzzer differential target for the hand-written split scanners (server/text/regex/
// split_scanner.h): the input, as a subject, goes through the GPT-2, Llama 3 and Qwen2 split
// patterns both by Regex::Compile (the scanner) and by Regex::CompileWithoutFastPath
// (Oniguruma); any difference in the spans aborts. Both the raw bytes (which FindAll reads with
// ill-formed sequences as '~') and the sanitized text are tried.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/common/utf8.h"
#include "server/text/regex/regex.h"

namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;

constexpr const char* kPatterns[] = {
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

struct Engines {
  loom::text::Regex fast, onig;
};

std::vector<Engines> CompileAll() {
  std::vector<Engines> all;
  for (const char* pattern : kPatterns) {
    absl::StatusOr<loom::text::Regex> fast = loom::text::Regex::Compile(pattern);
    absl::StatusOr<loom::text::Regex> onig = loom::text::Regex::CompileWithoutFastPath(pattern);
    if (!fast.ok() || !onig.ok()) std::abort();
    all.push_back(Engines{*fast, *onig});
  }
  return all;
}

void Compare(const Engines& engines, std::string_view text) {
  Spans fast, onig;
  engines.fast.FindAll(text, &fast);
  engines.onig.FindAll(text, &onig);
  if (fast != onig) {
    std::fprintf(stderr, "split scanner and Oniguruma differ: %zu vs %zu spans\n", fast.size(),
                 onig.size());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Engines>* const engines = new std::vector<Engines>(CompileAll());
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  const std::string text = loom::SanitizeUtf8(raw);
  for (const Engines& pair : *engines) {
    Compare(pair, text);
    if (text != raw) Compare(pair, raw);
  }
  return 0;
}
