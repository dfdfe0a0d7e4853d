#include "server/text/tokenizer/pattern.h"

#include <utility>

#include "absl/status/status.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom::text {

absl::StatusOr<Pattern> Pattern::FromJson(const Json& json) {
  if (json.IsObject() && json.Has("String")) {
    LOOM_ASSIGN_OR_RETURN(std::string literal, json.GetString("String"));
    return Literal(std::move(literal));
  }
  if (json.IsObject() && json.Has("Regex")) {
    LOOM_ASSIGN_OR_RETURN(std::string source, json.GetString("Regex"));
    absl::StatusOr<Pattern> pattern = FromRegex(source);
    if (!pattern.ok()) {
      return absl::InvalidArgumentError(
          StrCat(json.path(), ".Regex: ", pattern.status().message()));
    }
    return pattern;
  }
  return absl::InvalidArgumentError(
      StrCat(json.path(), ": expected {\"String\": ...} or {\"Regex\": ...}"));
}

Pattern Pattern::Literal(std::string literal) {
  Pattern pattern;
  pattern.literal_ = std::move(literal);
  return pattern;
}

absl::StatusOr<Pattern> Pattern::FromRegex(std::string_view regex) {
  LOOM_ASSIGN_OR_RETURN(Regex compiled, Regex::Compile(regex));
  Pattern pattern;
  pattern.regex_.emplace(std::move(compiled));
  return pattern;
}

void Pattern::FindAll(std::string_view text,
                      std::vector<std::pair<size_t, size_t>>* matches) const {
  if (regex_.has_value()) {
    regex_->FindAll(text, matches);
    return;
  }
  if (literal_.empty()) return;
  size_t pos = 0;
  while ((pos = text.find(literal_, pos)) != std::string_view::npos) {
    matches->emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
}

}  // namespace loom::text
