// Hand-written scanners for the pre-tokenizer split patterns of the common byte-level BPE
// tokenizers, which Regex uses instead of Oniguruma when a pattern is exactly one of them:
//
//   GPT-2 (and ByteLevel's use_regex):
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama 3:
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//     \s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2 / Qwen2.5 / Qwen3: Llama 3's with \p{N} in place of \p{N}{1,3}.
//
// Each scanner gives exactly the spans Oniguruma's leftmost, ordered-alternation, backtracking
// search gives for its pattern (Regex::FindAll's contract), on any well-formed UTF-8: the classes
// come from Oniguruma itself (split_classes.h), and the alternatives are tried in the pattern's
// order with the backtracking each one can do worked out by hand (see split_scanner.cc). They
// run in time linear in the text. Oniguruma's retry limit (Regex) can run out on the Llama 3 and
// Qwen2 patterns, whose \s*[\r\n]+ backtracks once per code point of a whitespace run (about 10
// million of them); a scanner that meets a whitespace run of kMaxExactSpaceRunBytes or more
// therefore declines, and Regex searches that text with Oniguruma. split_scanner_test and the
// split_scanner fuzzer compare the scanners with Oniguruma.
//
// Stateless; callable from any thread.
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::text::regex_internal {

// A whitespace run this long (bytes) makes a scanner decline; Oniguruma's retry limit is safe
// below it (a run of 2^20 spaces costs onig about one retry per space, the limit is 10^7).
inline constexpr size_t kMaxExactSpaceRunBytes = size_t{1} << 20;

// Appends the [begin, end) byte spans of every match in `text` (well-formed UTF-8), left to right,
// and returns true; or returns false, `matches` unchanged, when the text has a whitespace run of
// kMaxExactSpaceRunBytes or more (the caller then asks Oniguruma).
using SplitScanFn = bool (*)(std::string_view text,
                             std::vector<std::pair<size_t, size_t>>* matches);

// The scanner for `pattern` when it is, byte for byte, one of the patterns above; nullptr
// otherwise. Oniguruma must be initialized (its class tables are read on the first call).
SplitScanFn FindSplitScanner(std::string_view pattern);

}  // namespace loom::text::regex_internal
