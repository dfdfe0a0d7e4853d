#include "server/text/regex/regex.h"

#include "engine/common/status.h"
#include "server/text/regex/compiler.h"
#include "server/text/regex/matcher.h"
#include "server/text/regex/parser.h"
#include "server/text/regex/program.h"

namespace loom::text {

Regex::Regex(std::shared_ptr<const regex_internal::Program> program)
    : program_(std::move(program)) {}

Regex::~Regex() = default;

absl::StatusOr<Regex> Regex::Compile(std::string_view pattern) {
  LOOM_ASSIGN_OR_RETURN(regex_internal::ParsedPattern parsed,
                        regex_internal::ParsePattern(pattern));
  LOOM_ASSIGN_OR_RETURN(regex_internal::Program program,
                        regex_internal::CompileProgram(parsed));
  return Regex(std::make_shared<const regex_internal::Program>(std::move(program)));
}

// Mirrors the onig crate's FindMatches: an empty match that ends where the previous match ended
// is not reported; the search then moves one code point on.
void Regex::FindAll(std::string_view text,
                    std::vector<std::pair<size_t, size_t>>* matches) const {
  if (program_ == nullptr) return;
  regex_internal::Matcher matcher(*program_, text);
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= text.size()) {
    size_t begin = 0, end = 0;
    if (!matcher.Search(from, &begin, &end)) return;
    if (begin == end && have_last && end == last_end) {
      if (from == text.size()) return;
      size_t step = 1;
      while (from + step < text.size() &&
             (static_cast<uint8_t>(text[from + step]) & 0xC0) == 0x80) {
        ++step;
      }
      from += step;
      continue;
    }
    matches->emplace_back(begin, end);
    from = end;
    have_last = true;
    last_end = end;
  }
}

}  // namespace loom::text
