// libFuzzer entry point for the regex engine (server/text/regex).
//
// Input: a pattern, a 0x00 byte, then a subject (no 0x00: the whole input is the pattern and the
// subject is fixed). Compile must return a status for any bytes; FindAll must terminate with
// spans that are in bounds, ordered, non-overlapping and on code point boundaries, on the
// subject made well-formed (the API's precondition) and, for memory safety only, on the raw
// bytes too. Hangs and unbounded memory show up as libFuzzer timeouts / RSS limit failures.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/text/regex/regex.h"
#include "engine/common/utf8.h"

namespace {

constexpr std::string_view kDefaultSubject =
    "Hello world's 123 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80\n\t  x";

bool IsBoundary(std::string_view text, size_t pos) {
  return pos == text.size() || (static_cast<uint8_t>(text[pos]) & 0xC0) != 0x80;
}

void CheckSpans(std::string_view text, const std::vector<std::pair<size_t, size_t>>& spans,
                bool well_formed) {
  size_t prev_end = 0;
  bool first = true;
  for (const auto& [begin, end] : spans) {
    if (begin > end || end > text.size()) std::abort();
    if (!first && begin < prev_end) std::abort();
    if (!first && begin == end && end == prev_end) std::abort();  // find_iter skips these
    if (well_formed && (!IsBoundary(text, begin) || !IsBoundary(text, end))) std::abort();
    prev_end = end;
    first = false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view pattern = input.substr(0, split);
  const std::string_view raw_subject =
      split == std::string_view::npos ? kDefaultSubject : input.substr(split + 1);

  absl::StatusOr<loom::text::Regex> regex = loom::text::Regex::Compile(pattern);
  if (!regex.ok()) return 0;
  const std::string subject = loom::SanitizeUtf8(raw_subject);
  std::vector<std::pair<size_t, size_t>> spans;
  regex->FindAll(subject, &spans);
  CheckSpans(subject, spans, /*well_formed=*/true);
  if (subject != raw_subject) {
    spans.clear();
    regex->FindAll(raw_subject, &spans);
    CheckSpans(raw_subject, spans, /*well_formed=*/false);
  }
  return 0;
}
