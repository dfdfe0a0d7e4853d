// Sets of code points for the regex engine: character classes, properties and case folding.
//
// A CodePointSet is a sorted list of disjoint, non-adjacent inclusive ranges, so union,
// intersection and complement are linear merges. The matcher never searches these lists on the
// hot path; it tests a per-class bitmap built from them (see program.h). Pure values; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/text/unicode/unicode.h"

namespace loom::text::regex_internal {

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

class CodePointSet {
 public:
  // An inclusive range [first, second].
  using Range = std::pair<char32_t, char32_t>;

  CodePointSet() = default;

  // The set holding every code point whose general category is in `category_mask`
  // (bit i = GeneralCategory value i). Built from a table computed once per process.
  static CodePointSet OfCategories(uint32_t category_mask);

  // The union of `ranges` (any order, overlaps allowed).
  static CodePointSet FromRanges(std::vector<Range> ranges);

  // Adds [lo, hi] (lo <= hi <= kMaxCodePoint). Linear in the number of ranges unless [lo, hi]
  // lies at or after the last one; build large sets with FromRanges or AddSet.
  void AddRange(char32_t lo, char32_t hi);
  void Add(char32_t cp) { AddRange(cp, cp); }
  void AddSet(const CodePointSet& other);
  void Intersect(const CodePointSet& other);
  // Replaces the set by its complement in [0, kMaxCodePoint].
  void Negate();
  // Adds every code point that is equal to a member under simple case folding.
  void CloseOverCaseFolding();

  bool Contains(char32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<Range>& ranges() const { return ranges_; }
  bool operator==(const CodePointSet& other) const { return ranges_ == other.ranges_; }

 private:
  std::vector<Range> ranges_;
};

// Bit mask of a set of general categories.
constexpr uint32_t CategoryBit(GeneralCategory c) { return uint32_t{1} << static_cast<int>(c); }

// Where a property name is written; Oniguruma gives a few names different sets in each.
enum class PropertySyntax {
  kEscape,         // \p{Word} outside brackets
  kEscapeInClass,  // [\p{Word}]
  kPosixBracket,   // [[:word:]]
};

// The set of a named property, case and the characters ' ', '_', '-' ignored: general
// categories and their one-letter groups (L, M, N, P, S, Z, C, also long names like Letter),
// LC/L&, and Digit, Space, Word, Punct, Cntrl, Blank, XDigit, Any, Assigned, ASCII as Oniguruma
// defines them for UTF-8 ([:punct:] also holds the symbols, \p{Punct} does not; see WordSet for
// Word). Properties utf8proc cannot answer exactly (Alpha, Alnum, Upper, Lower, Graph, Print,
// scripts) are unknown: returns false.
bool LookupProperty(std::string_view name, PropertySyntax syntax, CodePointSet* out);

// \s, \d, \w and \h as Oniguruma defines them for UTF-8: White_Space, Nd, Alphabetic + M + Nd +
// Pc, ASCII hex digits. Outside brackets, \w, \W, \p{Word} and \b also count the Latin-1
// numbers ² ³ ¹ ¼ ½ ¾ as word characters (Oniguruma tests code points below 256 against its
// Latin-1 table there); inside brackets they do not: WordSet(/*latin1_numbers=*/false).
CodePointSet SpaceSet();
CodePointSet DigitSet();
CodePointSet WordSet(bool latin1_numbers);
CodePointSet HexDigitSet();

// The full case folding of `cp` (CaseFolding.txt C + F: "ss" for U+00DF), 1 to 3 code points.
std::u32string FullCaseFold(char32_t cp);

// The code points whose full case folding is `fold` (at least two code points long): U+00DF and
// U+1E9E for "ss". Empty when there are none.
CodePointSet CodePointsFoldingTo(std::u32string_view fold);

// The distinct multi-character full case foldings of the members of `set`, in folding order.
std::vector<std::u32string> MultiCharFoldsOf(const CodePointSet& set);

// True when `cp` is a word character for \b and \B (WordSet membership, fast path for ASCII).
bool IsWordChar(char32_t cp);

// True when `cp` is one of the Latin-1 numbers ² ³ ¹ ¼ ½ ¾ that \w (not [[:word:]]) matches.
constexpr bool IsLatin1WordNumber(char32_t cp) {
  return cp == 0xB2 || cp == 0xB3 || cp == 0xB9 || (cp >= 0xBC && cp <= 0xBE);
}

}  // namespace loom::text::regex_internal
