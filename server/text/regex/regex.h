// The regular expressions of tokenizer.json files (Split / Replace patterns), on Oniguruma.
//
// HF tokenizers compiles these patterns with Oniguruma through the onig crate (default options,
// ONIG_SYNTAX_ONIGURUMA, UTF-8); Regex does the same with the system's libonig, so the syntax is
// Oniguruma's in full (scripts, POSIX brackets, backreferences, ...). The system library may be
// an older Oniguruma than the one HF bundles: characters of newer Unicode versions, and
// [[:punct:]] and \p{Word} (which newer Oniguruma widened to symbols / other numbers), may
// then classify differently.
//
// Hostile patterns cannot hang: a match attempt at one start position gives up after onig's
// default retry limit (as HF does), one search after a limit proportional to the text left, and
// the backtrack stack is bounded by the text length. When a limit runs out (HF's onig crate
// panics there), no further matches are reported, so the caller sees the rest of the text as
// unmatched.
//
// The split patterns of GPT-2, Llama 3 and Qwen2/2.5/3 (split_scanner.h), matched byte for byte,
// are searched by hand-written scanners that give Oniguruma's spans 2-4x faster (tokenizer_bench,
// bench/results/text/README.md); every other pattern is searched by Oniguruma.
//
// A compiled Regex is immutable; copies share it. FindAll is const and thread-safe (Oniguruma is
// initialized once, by the first Compile).
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
  // Compiles a pattern as found in tokenizer.json. Syntax errors (and a pattern that is not
  // well-formed UTF-8) give InvalidArgument with Oniguruma's message.
  static absl::StatusOr<Regex> Compile(std::string_view pattern);
  // As Compile, but always searched by Oniguruma, even for the patterns that have a
  // hand-written scanner (to compare the two, in tests and benchmarks).
  static absl::StatusOr<Regex> CompileWithoutFastPath(std::string_view pattern);

  // Appends [begin, end) byte offsets of every match in `text` (well-formed UTF-8; for memory
  // safety only, each byte of an ill-formed sequence reads as '~'), left to right
  // like onig's find_iter: the leftmost match starting at or after the previous match's end; an
  // empty match is reported and the search resumes one character later (an empty match where
  // the previous match ended is skipped, as onig's iterator does). Const and thread-safe.
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

  // A Regex that matches nothing (a placeholder until one is compiled).
  Regex() = default;

  // Copies share the compiled regex (cheap; it is immutable).
  Regex(const Regex&) = default;
  Regex& operator=(const Regex&) = default;
  Regex(Regex&&) noexcept = default;
  Regex& operator=(Regex&&) noexcept = default;
  ~Regex();

 private:
  explicit Regex(std::shared_ptr<const regex_internal::Program> program);
  static absl::StatusOr<Regex> Compile(std::string_view pattern, bool use_split_scanner);

  std::shared_ptr<const regex_internal::Program> program_;
};

}  // namespace loom::text
