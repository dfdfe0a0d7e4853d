#include "server/text/unicode/unicode.h"

#include <array>
#include <cstdlib>
#include <initializer_list>

#include "engine/common/utf8.h"
#include "utf8proc.h"

namespace loom::text {
namespace {

// utf8proc numbers Cn as 0 and the rest in our order from 1.
GeneralCategory FromUtf8proc(int category) {
  return category == 0 ? GeneralCategory::kCn : static_cast<GeneralCategory>(category - 1);
}

// Categories of U+0000..U+00FF, computed once at compile time from the ranges of UnicodeData.
constexpr std::array<GeneralCategory, 256> MakeLatin1Table() {
  using C = GeneralCategory;
  std::array<C, 256> table{};
  for (int cp = 0; cp < 256; ++cp) {
    C c = C::kPo;
    if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) c = C::kCc;
    else if (cp == ' ' || cp == 0xA0) c = C::kZs;
    else if (cp >= '0' && cp <= '9') c = C::kNd;
    else if (cp >= 'A' && cp <= 'Z') c = C::kLu;
    else if (cp >= 'a' && cp <= 'z') c = C::kLl;
    else if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) c = C::kLu;
    else if (cp >= 0xDF && cp <= 0xFF && cp != 0xF7) c = C::kLl;
    table[cp] = c;
  }
  // The remaining ASCII and Latin-1 punctuation and symbols, one by one.
  auto set = [&table](std::initializer_list<int> cps, C c) {
    for (const int cp : cps) table[static_cast<size_t>(cp)] = c;
  };
  set({'$', 0xA2, 0xA3, 0xA4, 0xA5}, C::kSc);
  set({'+', '<', '=', '>', '|', '~', 0xAC, 0xB1, 0xD7, 0xF7}, C::kSm);
  set({'^', '`', 0xA8, 0xAF, 0xB4, 0xB8}, C::kSk);
  set({0xA6, 0xA9, 0xAE, 0xB0}, C::kSo);
  set({'(', '[', '{'}, C::kPs);
  set({')', ']', '}'}, C::kPe);
  table['-'] = C::kPd;
  table['_'] = C::kPc;
  table[0xAB] = C::kPi;
  table[0xBB] = C::kPf;
  table[0xAD] = C::kCf;
  table[0xAA] = C::kLo;
  table[0xBA] = C::kLo;
  table[0xB5] = C::kLl;
  set({0xB2, 0xB3, 0xB9, 0xBC, 0xBD, 0xBE}, C::kNo);
  return table;
}

constexpr std::array<GeneralCategory, 256> kLatin1Categories = MakeLatin1Table();

bool IsCased(char32_t cp) {
  const GeneralCategory c = CategoryOf(cp);
  if (c == GeneralCategory::kLu || c == GeneralCategory::kLl || c == GeneralCategory::kLt) {
    return true;
  }
  // Other_Lowercase / Other_Uppercase: the ordinal indicators are the ones outside Lm (which is
  // case-ignorable, so skipped before this test) without a case mapping; circled letters and
  // Roman numerals have mappings.
  if (cp == 0xAA || cp == 0xBA) return true;
  const auto c32 = static_cast<utf8proc_int32_t>(cp);
  return utf8proc_tolower(c32) != c32 || utf8proc_toupper(c32) != c32;
}

bool IsCaseIgnorable(char32_t cp) {
  switch (CategoryOf(cp)) {
    case GeneralCategory::kMn:
    case GeneralCategory::kMe:
    case GeneralCategory::kCf:
    case GeneralCategory::kLm:
    case GeneralCategory::kSk:
      return true;
    default:
      break;
  }
  // Word_Break MidLetter, MidNumLet and Single_Quote.
  switch (cp) {
    case '\'': case '.': case ':': case 0xB7: case 0x387: case 0x55F: case 0x5F4: case 0x2018:
    case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55: case 0xFF07:
    case 0xFF0E: case 0xFF1A:
      return true;
    default:
      return false;
  }
}

// Unicode 3.13 Final_Sigma: a cased letter (after skipping case-ignorables) comes before
// text[pos] and none comes after text[pos + len].
bool IsFinalSigma(std::string_view text, size_t pos, size_t len) {
  bool cased_before = false;
  size_t i = pos;
  while (i > 0) {
    size_t start = i - 1;
    while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    size_t n = 0;
    const char32_t cp = DecodeUtf8(text, start, &n);
    i = start;
    if (IsCaseIgnorable(cp)) continue;
    cased_before = IsCased(cp);
    break;
  }
  if (!cased_before) return false;
  for (size_t j = pos + len; j < text.size();) {
    size_t n = 0;
    const char32_t cp = DecodeUtf8(text, j, &n);
    j += n;
    if (IsCaseIgnorable(cp)) continue;
    return !IsCased(cp);
  }
  return true;
}

}  // namespace

GeneralCategory CategoryOf(char32_t cp) {
  if (cp < 256) return kLatin1Categories[cp];
  if (cp > 0x10FFFF) return GeneralCategory::kCn;
  return FromUtf8proc(utf8proc_category(static_cast<utf8proc_int32_t>(cp)));
}

bool IsWhitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string Normalize(std::string_view utf8, NormalizationForm form) {
  bool ascii = true;
  for (const char c : utf8) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
  if (ascii) return std::string(utf8);  // ASCII is invariant under every form.
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalizationForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalizationForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalizationForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalizationForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                   static_cast<utf8proc_ssize_t>(utf8.size()), &out,
                   static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    // Only ill-formed input fails; the contract excludes it, so return it sanitized.
    std::free(out);
    return SanitizeUtf8(utf8);
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

std::string ToLowerCase(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size();) {
    const auto byte = static_cast<uint8_t>(utf8[i]);
    if (byte < 0x80) {
      out.push_back(byte >= 'A' && byte <= 'Z' ? static_cast<char>(byte + 32) : utf8[i]);
      ++i;
      continue;
    }
    size_t len = 0;
    const char32_t cp = DecodeUtf8(utf8, i, &len);
    if (cp == 0x130) {
      // The one unconditional multi-character lowercase mapping (SpecialCasing.txt).
      out.append("i\xCC\x87");
    } else if (cp == 0x3A3) {
      AppendUtf8(IsFinalSigma(utf8, i, len) ? 0x3C2 : 0x3C3, &out);
    } else {
      AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &out);
    }
    i += len;
  }
  return out;
}

}  // namespace loom::text
