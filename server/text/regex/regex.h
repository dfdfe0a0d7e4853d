// A regular-expression engine for the patterns found in tokenizer.json files.
//
// HF tokenizers compiles its Split / pre-tokenizer / normalizer patterns with Oniguruma (Ruby
// syntax, UTF-8 encoding); Regex reproduces those match semantics for the syntax tokenizer files
// use: literals, escapes, classes with Unicode properties, groups, alternation,
// greedy/lazy/possessive quantifiers, anchors, lookahead, bounded-width lookbehind, atomic
// groups, case-insensitive groups with simple Unicode case folding (parser.h lists the syntax;
// the rest is rejected rather than guessed). The pattern is compiled to a program (program.h)
// run by a backtracking matcher over code points (matcher.h) with per-class bitmaps, first-
// character guards on alternatives and a lead-byte prefilter for start positions.
//
// Hostile patterns cannot hang or exhaust memory: parsing depth, program size, class count,
// backtrack stack and work are bounded. Each start position gets a step budget; once one runs
// out, the search continues with memoized backtracking (each program state explored once), and
// an attempt that still runs out counts as "no match at this position". A whole FindAll has a
// step budget proportional to the text length; when it is spent, no further matches are
// reported (so the caller sees the rest of the text as unmatched). Real tokenizer patterns use
// a few steps per byte and never get near these limits.
//
// A compiled Regex is immutable; copies share the program. FindAll is const and thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::text {

namespace regex_internal {
struct Program;
}  // namespace regex_internal

class Regex {
 public:
  // Compiles a pattern as found in tokenizer.json (Oniguruma/Ruby syntax, which HF tokenizers
  // uses through onig). Unsupported constructs and syntax errors give InvalidArgument naming the
  // byte offset in the pattern; patterns too large once counted repeats are expanded (over
  // 2^17 instructions or 2048 distinct classes) give InvalidArgument too.
  static absl::StatusOr<Regex> Compile(std::string_view pattern);

  // Appends [begin, end) byte offsets of every match in `text` (well-formed UTF-8), left to right
  // like onig's find_iter: the leftmost match starting at or after the previous match's end; an
  // empty match is reported and the search resumes one character later (an empty match where
  // the previous match ended is skipped, as onig's iterator does). Const and thread-safe.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

  // A Regex that matches nothing (a placeholder until one is compiled).
  Regex() = default;

  // Copies share the compiled program (cheap; the program is immutable).
  Regex(const Regex&) = default;
  Regex& operator=(const Regex&) = default;
  Regex(Regex&&) noexcept = default;
  Regex& operator=(Regex&&) noexcept = default;
  ~Regex();

 private:
  explicit Regex(std::shared_ptr<const regex_internal::Program> program);

  std::shared_ptr<const regex_internal::Program> program_;
};

}  // namespace loom::text
