#include "server/text/regex/split_classes.h"

#include <oniguruma.h>

#include <algorithm>
#include <cstring>

#include "engine/common/logging.h"

namespace loom::text::regex_internal {

namespace {

constexpr char32_t kNumCodePoints = 0x110000;

// Sets `bit` on every code point of Oniguruma's ranges for `ctype`.
void MarkCtype(OnigCtype ctype, uint8_t bit, std::vector<uint8_t>* bits) {
  OnigCodePoint single_byte_end = 0;
  const OnigCodePoint* ranges = nullptr;
  const int status =
      ONIGENC_GET_CTYPE_CODE_RANGE(ONIG_ENCODING_UTF8, ctype, &single_byte_end, &ranges);
  LOOM_CHECK(status == ONIG_NORMAL && ranges != nullptr,
             "Oniguruma has no code point ranges for ctype ", ctype, " (code ", status, ")");
  // ranges[0] is the number of [from, to] pairs that follow.
  for (OnigCodePoint i = 0; i < ranges[0]; ++i) {
    const OnigCodePoint from = ranges[1 + 2 * i];
    const OnigCodePoint to = std::min<OnigCodePoint>(ranges[2 + 2 * i], kNumCodePoints - 1);
    for (OnigCodePoint cp = from; cp <= to; ++cp) (*bits)[cp] |= bit;
  }
}

OnigCtype PropertyCtype(const char* name) {
  auto* begin = reinterpret_cast<OnigUChar*>(const_cast<char*>(name));
  const int ctype = ONIGENC_PROPERTY_NAME_TO_CTYPE(ONIG_ENCODING_UTF8, begin,
                                                   begin + std::strlen(name));
  LOOM_CHECK(ctype >= 0, "Oniguruma does not know the property ", name, " (code ", ctype, ")");
  return static_cast<OnigCtype>(ctype);
}

}  // namespace

SplitClasses::SplitClasses() : bits_(kNumCodePoints, 0) {
  MarkCtype(PropertyCtype("L"), kLetterBit, &bits_);
  MarkCtype(PropertyCtype("N"), kNumberBit, &bits_);
  MarkCtype(ONIGENC_CTYPE_SPACE, kSpaceBit, &bits_);
  for (char lower = 'a'; lower <= 'z'; ++lower) {
    std::vector<char32_t>& folds = folds_[lower - 'a'];
    folds.push_back(static_cast<char32_t>(lower));
    OnigCaseFoldCodeItem items[ONIGENC_GET_CASE_FOLD_CODES_MAX_NUM];
    const auto* p = reinterpret_cast<const OnigUChar*>(&lower);
    const int num_items = ONIGENC_GET_CASE_FOLD_CODES_BY_STR(
        ONIG_ENCODING_UTF8, onig_get_default_case_fold_flag(), p, p + 1, items);
    LOOM_CHECK(num_items >= 0, "Oniguruma case folding failed (code ", num_items, ")");
    for (int i = 0; i < num_items; ++i) {
      // Only single code points stand for a single letter.
      if (items[i].byte_len == 1 && items[i].code_len == 1) {
        folds.push_back(static_cast<char32_t>(items[i].code[0]));
      }
    }
  }
}

const SplitClasses& SplitClasses::Get() {
  static const SplitClasses* const classes = new SplitClasses();
  return *classes;
}

bool SplitClasses::FoldsTo(char32_t cp, char lower) const {
  const std::vector<char32_t>& folds = folds_[lower - 'a'];
  return std::find(folds.begin(), folds.end(), cp) != folds.end();
}

}  // namespace loom::text::regex_internal
