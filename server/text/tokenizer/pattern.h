// A search pattern as tokenizer.json spells it: {"String": "..."} (a literal) or {"Regex": "..."}
// (Oniguruma syntax, compiled by loom::text::Regex). Used by the Split pre-tokenizer and the
// Replace normalizer and decoder. Immutable after construction; FindAll is const and thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/json.h"
#include "server/text/regex/regex.h"

namespace loom::text {

// A literal or a compiled regular expression.
class Pattern {
 public:
  // Parses {"String": s} or {"Regex": r}; InvalidArgument naming `json.path()` otherwise.
  static absl::StatusOr<Pattern> FromJson(const Json& json);
  // A literal pattern.
  static Pattern Literal(std::string literal);
  // A compiled regular expression.
  static absl::StatusOr<Pattern> FromRegex(std::string_view regex);

  // Appends the [begin, end) byte ranges of the non-overlapping matches in `text`, left to right.
  // An empty literal matches nothing.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  std::string literal_;
  std::optional<Regex> regex_;
};

}  // namespace loom::text
