// Unicode character properties, normalization and case mapping for the text layer.
//
// The tokenizer pipeline needs the same answers HF tokenizers (Rust `char` methods and the
// `unicode-normalization` crate) gives: general categories for pre-tokenizer regexes, the
// White_Space property, NFC/NFD/NFKC/NFKD and lowercasing. Latin-1 answers come from tables
// built at compile time; everything else from utf8proc (Unicode 15). Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom::text {

// Unicode General_Category values (UAX #44), in the order utf8proc numbers them after Cn.
enum class GeneralCategory : uint8_t {
  kLu, kLl, kLt, kLm, kLo,             // letters
  kMn, kMc, kMe,                       // marks
  kNd, kNl, kNo,                       // numbers
  kPc, kPd, kPs, kPe, kPi, kPf, kPo,   // punctuation
  kSm, kSc, kSk, kSo,                  // symbols
  kZs, kZl, kZp,                       // separators
  kCc, kCf, kCs, kCo, kCn,             // other (kCn: unassigned)
};

// Number of GeneralCategory values.
inline constexpr int kNumGeneralCategories = 30;

// The general category of `cp`; kCn for unassigned code points and values past U+10FFFF.
GeneralCategory CategoryOf(char32_t cp);

// True when `cp` has the Unicode White_Space property (Rust `char::is_whitespace`).
bool IsWhitespace(char32_t cp);

// Unicode normalization forms (UAX #15).
enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

// `utf8` (well-formed UTF-8) normalized to `form`.
std::string Normalize(std::string_view utf8, NormalizationForm form);

// `utf8` (well-formed UTF-8) lowercased like Rust `str::to_lowercase`: full lowercase mappings
// (U+0130 becomes "i\u0307") and the context-sensitive final sigma rule.
std::string ToLowerCase(std::string_view utf8);

}  // namespace loom::text
