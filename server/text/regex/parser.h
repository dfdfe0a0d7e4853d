// Parser for the Oniguruma (Ruby syntax) regular expressions found in tokenizer.json files.
//
// Produces a ParsedPattern (ast.h). Supported: literals (UTF-8), escapes (\t \n \r \f \v \a \e,
// \xHH, \x{H...}, \uHHHH, \0oo, escaped punctuation), \d \D \w \W \s \S \h \H, \p{..} \P{..}
// \p{^..}, classes with ranges, negation, nested classes, && intersection and [:posix:] names,
// `.`, groups ( ), (?:), (?<name>), (?#), (?imx-imx) and (?imx-imx:), alternation, quantifiers
// * + ? {n} {n,} {,m} {n,m} with lazy (?) and possessive (+) suffixes, anchors ^ $ \A \z \Z \b
// \B, lookahead, lookbehind and atomic groups. Oniguruma's Ruby-syntax rules are followed where
// they differ from Perl: "x{n}?" is (?:x{n})?, '+' after {..} is another quantifier, "(?i)"
// covers the rest of its group including later alternatives, an anchor or lookaround cannot be
// repeated (also as a branch of a bare alternation), a lookbehind cannot contain lookahead, \z,
// \Z or (inside a positive one) a negative lookbehind, and under (?i) a bracket class is closed
// over case folding as a whole before its negation. Everything else (backreferences,
// subexpression calls, \G, \K, \R, \X, \y, scripts and other properties utf8proc cannot answer
// in \p) is InvalidArgument with the byte offset. Nesting deeper than kMaxNestingDepth is an
// error, so parsing never exhausts the stack.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "server/text/regex/ast.h"

namespace loom::text::regex_internal {

// Groups plus quantifiers nested deeper than this are rejected.
inline constexpr int kMaxNestingDepth = 100;

// Largest repeat count accepted in {n,m} (Oniguruma's ONIG_MAX_REPEAT_NUM).
inline constexpr int kMaxRepeatCount = 100000;

absl::StatusOr<ParsedPattern> ParsePattern(std::string_view pattern);

}  // namespace loom::text::regex_internal
