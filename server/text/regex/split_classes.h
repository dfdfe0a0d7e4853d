// The character classes the fast split scanners (split_scanner.h) need, taken from Oniguruma
// itself so that they agree with the regex engine: \p{L}, \p{N} and \s (Unicode White_Space, as
// onig reads \s in UTF-8) for every code point, and the code points that (?i) lets match each
// ASCII letter (for 's that is also U+017F LATIN SMALL LETTER LONG S).
//
// Built once, from Oniguruma's own range tables, by the first caller (Oniguruma must already be
// initialized); immutable and thread-safe afterwards.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::text::regex_internal {

// Bits of a code point's class.
inline constexpr uint8_t kLetterBit = 1;  // \p{L}
inline constexpr uint8_t kNumberBit = 2;  // \p{N}
inline constexpr uint8_t kSpaceBit = 4;   // \s

class SplitClasses {
 public:
  // The table, built on first use from ONIG_ENCODING_UTF8's ranges. Crashes with a message if
  // Oniguruma does not know the classes (a broken install).
  static const SplitClasses& Get();

  // kLetterBit | kNumberBit | kSpaceBit of `cp` (0 past U+10FFFF).
  uint8_t Of(char32_t cp) const { return cp < bits_.size() ? bits_[cp] : 0; }

  // Whether `cp` matches the ASCII letter `lower` ('a'..'z') under (?i), as onig's single code
  // point case folding has it.
  bool FoldsTo(char32_t cp, char lower) const;

 private:
  SplitClasses();

  std::vector<uint8_t> bits_;  // one entry per code point, U+0000..U+10FFFF
  // Per ASCII letter: the code points that match it under (?i) (itself included).
  std::array<std::vector<char32_t>, 26> folds_;
};

}  // namespace loom::text::regex_internal
