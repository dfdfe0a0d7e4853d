// Escapes, \p{...} properties and bracket classes of the regex parser (see parser_impl.h).
#include <algorithm>
#include <string>

#include "engine/common/status.h"
#include "server/text/regex/parser.h"
#include "server/text/regex/parser_impl.h"

namespace loom::text::regex_internal {

absl::StatusOr<char32_t> Parser::ParseHex(size_t min_digits, size_t max_digits, bool braced) {
  const size_t start = pos_;
  uint32_t value = 0;
  size_t n = 0;
  while (n < max_digits && HexValue(Peek()) >= 0 && !AtEnd()) {
    value = value * 16 + static_cast<uint32_t>(HexValue(Peek()));
    ++pos_;
    ++n;
  }
  if (n < min_digits) return ErrorAt("invalid hexadecimal escape", start);
  if (braced && !Consume('}')) return ErrorAt("invalid \\x{...} escape", start);
  if (value > kMaxCodePoint || (value >= 0xD800 && value <= 0xDFFF)) {
    return ErrorAt("invalid code point", start);
  }
  return static_cast<char32_t>(value);
}

absl::StatusOr<CodePointSet> Parser::ParseProperty(bool negated, bool in_class) {
  const size_t start = pos_;
  if (!Consume('{')) return ErrorAt("expected '{' after \\p", start);
  if (Consume('^')) negated = !negated;
  const size_t name_start = pos_;
  while (!AtEnd() && Peek() != '}') ++pos_;
  if (AtEnd()) return ErrorAt("unterminated property name", start);
  const std::string_view name = p_.substr(name_start, pos_ - name_start);
  ++pos_;
  CodePointSet set;
  const PropertySyntax syntax =
      in_class ? PropertySyntax::kEscapeInClass : PropertySyntax::kEscape;
  if (!LookupProperty(name, syntax, &set)) {
    return ErrorAt("unknown or unsupported property", name_start);
  }
  if (negated) set.Negate();
  return set;
}

// Parses the escape after a backslash (pos_ just past it). Inside a class, \b is a backspace
// and anchors are not allowed.
absl::StatusOr<Escape> Parser::ParseEscape(bool in_class) {
  const size_t start = pos_ - 1;
  if (AtEnd()) return ErrorAt("trailing backslash", start);
  Escape esc;
  const char c = Peek();
  if (static_cast<unsigned char>(c) >= 0x80) {
    esc.cp = NextCodePoint();
    return esc;
  }
  ++pos_;
  auto set = [&](CodePointSet s, bool negate) {
    if (negate) s.Negate();
    esc.kind = Escape::Kind::kSet;
    esc.set = std::move(s);
    return esc;
  };
  auto assertion = [&](AssertKind kind) -> absl::StatusOr<Escape> {
    if (in_class) return ErrorAt("anchor inside a character class", start);
    esc.kind = Escape::Kind::kAssert;
    esc.assert_kind = kind;
    return esc;
  };
  switch (c) {
    case 't': esc.cp = '\t'; return esc;
    case 'n': esc.cp = '\n'; return esc;
    case 'r': esc.cp = '\r'; return esc;
    case 'f': esc.cp = '\f'; return esc;
    case 'v': esc.cp = '\v'; return esc;
    case 'a': esc.cp = 0x07; return esc;
    case 'e': esc.cp = 0x1B; return esc;
    case 'd': return set(DigitSet(), false);
    case 'D': return set(DigitSet(), true);
    case 'w': return set(WordSet(/*latin1_numbers=*/!in_class), false);
    case 'W': return set(WordSet(/*latin1_numbers=*/!in_class), true);
    case 's': return set(SpaceSet(), false);
    case 'S': return set(SpaceSet(), true);
    case 'h': return set(HexDigitSet(), false);
    case 'H': return set(HexDigitSet(), true);
    case 'p':
    case 'P': {
      LOOM_ASSIGN_OR_RETURN(CodePointSet s, ParseProperty(c == 'P', in_class));
      return set(std::move(s), false);
    }
    case 'x': {
      const bool braced = Consume('{');
      LOOM_ASSIGN_OR_RETURN(esc.cp, braced ? ParseHex(1, 8, true) : ParseHex(1, 2, false));
      return esc;
    }
    case 'u': {
      LOOM_ASSIGN_OR_RETURN(esc.cp, ParseHex(4, 4, false));
      return esc;
    }
    case '0': {
      uint32_t value = 0;
      for (int i = 0; i < 2 && Peek() >= '0' && Peek() <= '7' && !AtEnd(); ++i) {
        value = value * 8 + static_cast<uint32_t>(Peek() - '0');
        ++pos_;
      }
      esc.cp = value;
      return esc;
    }
    case 'b':
      if (in_class) {
        esc.cp = 0x08;
        return esc;
      }
      return assertion(AssertKind::kWordBoundary);
    case 'B': return assertion(AssertKind::kNotWordBoundary);
    case 'A': return assertion(AssertKind::kTextBegin);
    case 'z': return assertion(AssertKind::kTextEnd);
    case 'Z': return assertion(AssertKind::kTextEndNl);
    default:
      break;
  }
  if ((c >= '1' && c <= '9') || c == 'k' || c == 'g') {
    return ErrorAt("backreferences and subexpression calls are not supported", start);
  }
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
    // \G \K \R \X \N \O \y \Y \c \C \M and friends: not supported rather than guessed.
    return ErrorAt("unsupported escape", start);
  }
  esc.cp = static_cast<unsigned char>(c);
  return esc;
}

// Parses a bracket class; pos_ is just past '['. Under (?i), Oniguruma closes the content of
// the outermost class over case folding (properties and nested classes included, each nested
// class with its own negation already applied) and only then applies the outer negation:
// "(?i)[^\p{Lu}]" excludes lowercase letters too.
absl::StatusOr<CodePointSet> Parser::ParseClass(const Options& opts, int depth, bool top_level) {
  if (depth > kMaxNestingDepth) return Error("classes nested too deeply");
  const size_t open = pos_ - 1;
  const bool negate = Consume('^');
  CodePointSet items, left;
  std::vector<CodePointSet::Range> chars;
  bool has_left = false;
  bool first = true;
  auto finish_operand = [&]() {
    items.AddSet(CodePointSet::FromRanges(std::move(chars)));
    if (has_left) left.Intersect(items); else left = std::move(items);
    has_left = true;
    items = CodePointSet();
    chars.clear();
  };
  while (true) {
    if (AtEnd()) return ErrorAt("unterminated character class", open);
    if (Peek() == ']' && !first) {
      ++pos_;
      break;
    }
    if (Peek() == '&' && Peek(1) == '&') {
      pos_ += 2;
      finish_operand();
      first = false;
      continue;
    }
    LOOM_RETURN_IF_ERROR(ParseClassItem(opts, depth, &items, &chars));
    first = false;
  }
  finish_operand();
  if (top_level && opts.ignore_case) left.CloseOverCaseFolding();
  if (negate) left.Negate();
  return left;
}

absl::Status Parser::ParseClassItem(const Options& opts, int depth, CodePointSet* items,
                                    std::vector<CodePointSet::Range>* chars) {
  if (Peek() == '[') {
    if (Peek(1) == ':') {
      // A POSIX bracket [:name:] or [:^name:]; anything else starting "[:" is a nested class.
      // Names are short; looking further would make "[:[:[:..." quadratic.
      const size_t close = p_.substr(0, std::min(p_.size(), pos_ + 24)).find(":]", pos_ + 2);
      if (close != std::string_view::npos) {
        std::string_view name = p_.substr(pos_ + 2, close - pos_ - 2);
        const bool negated = !name.empty() && name[0] == '^';
        if (negated) name.remove_prefix(1);
        CodePointSet set;
        if (LookupProperty(name, PropertySyntax::kPosixBracket, &set)) {
          if (negated) set.Negate();
          items->AddSet(set);
          pos_ = close + 2;
          return absl::OkStatus();
        }
      }
    }
    ++pos_;
    LOOM_ASSIGN_OR_RETURN(CodePointSet nested, ParseClass(opts, depth + 1, /*top_level=*/false));
    items->AddSet(nested);
    return absl::OkStatus();
  }
  // One code point (literal or escaped), possibly the start of a range.
  auto parse_char = [&](bool* is_set, CodePointSet* set) -> absl::StatusOr<char32_t> {
    *is_set = false;
    if (Peek() != '\\') return NextCodePoint();
    ++pos_;
    LOOM_ASSIGN_OR_RETURN(Escape esc, ParseEscape(/*in_class=*/true));
    if (esc.kind == Escape::Kind::kSet) {
      *is_set = true;
      *set = std::move(esc.set);
    }
    return esc.cp;
  };
  const size_t start = pos_;
  bool is_set = false;
  CodePointSet set;
  LOOM_ASSIGN_OR_RETURN(const char32_t lo, parse_char(&is_set, &set));
  if (is_set) {
    items->AddSet(set);
    return absl::OkStatus();
  }
  if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < p_.size()) {
    ++pos_;
    bool hi_is_set = false;
    CodePointSet hi_set;
    LOOM_ASSIGN_OR_RETURN(const char32_t hi, parse_char(&hi_is_set, &hi_set));
    if (hi_is_set) {
      // "[a-\d]": the '-' is literal.
      chars->emplace_back(lo, lo);
      chars->emplace_back('-', '-');
      items->AddSet(hi_set);
      return absl::OkStatus();
    }
    if (hi < lo) return ErrorAt("character class range out of order", start);
    chars->emplace_back(lo, hi);
    return absl::OkStatus();
  }
  chars->emplace_back(lo, lo);
  return absl::OkStatus();
}

}  // namespace loom::text::regex_internal
