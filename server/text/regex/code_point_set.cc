#include "server/text/regex/code_point_set.h"

#include <algorithm>
#include <array>
#include <string>

#include "utf8proc.h"

namespace loom::text::regex_internal {
namespace {

using Range = CodePointSet::Range;

constexpr uint32_t kLetters = CategoryBit(GeneralCategory::kLu) |
    CategoryBit(GeneralCategory::kLl) | CategoryBit(GeneralCategory::kLt) |
    CategoryBit(GeneralCategory::kLm) | CategoryBit(GeneralCategory::kLo);
constexpr uint32_t kMarks = CategoryBit(GeneralCategory::kMn) |
    CategoryBit(GeneralCategory::kMc) | CategoryBit(GeneralCategory::kMe);
constexpr uint32_t kNumbers = CategoryBit(GeneralCategory::kNd) |
    CategoryBit(GeneralCategory::kNl) | CategoryBit(GeneralCategory::kNo);
constexpr uint32_t kPunctuation = CategoryBit(GeneralCategory::kPc) |
    CategoryBit(GeneralCategory::kPd) | CategoryBit(GeneralCategory::kPs) |
    CategoryBit(GeneralCategory::kPe) | CategoryBit(GeneralCategory::kPi) |
    CategoryBit(GeneralCategory::kPf) | CategoryBit(GeneralCategory::kPo);
constexpr uint32_t kSymbols = CategoryBit(GeneralCategory::kSm) |
    CategoryBit(GeneralCategory::kSc) | CategoryBit(GeneralCategory::kSk) |
    CategoryBit(GeneralCategory::kSo);
constexpr uint32_t kSeparators = CategoryBit(GeneralCategory::kZs) |
    CategoryBit(GeneralCategory::kZl) | CategoryBit(GeneralCategory::kZp);
constexpr uint32_t kOthers = CategoryBit(GeneralCategory::kCc) |
    CategoryBit(GeneralCategory::kCf) | CategoryBit(GeneralCategory::kCs) |
    CategoryBit(GeneralCategory::kCo) | CategoryBit(GeneralCategory::kCn);
constexpr uint32_t kAllCategories = (uint32_t{1} << kNumGeneralCategories) - 1;

// The code points of each general category as ranges, computed once per process by scanning
// the whole code space (a few milliseconds) and immutable afterwards.
const std::array<std::vector<Range>, kNumGeneralCategories>& CategoryRanges() {
  static const auto* const table = [] {
    auto* t = new std::array<std::vector<Range>, kNumGeneralCategories>();
    char32_t start = 0;
    GeneralCategory current = CategoryOf(0);
    for (char32_t cp = 1; cp <= kMaxCodePoint + 1; ++cp) {
      const GeneralCategory c = cp <= kMaxCodePoint ? CategoryOf(cp) : GeneralCategory::kCn;
      if (cp <= kMaxCodePoint && c == current) continue;
      (*t)[static_cast<int>(current)].emplace_back(start, cp - 1);
      start = cp;
      current = c;
    }
    return t;
  }();
  return *table;
}

// Simple case folding: the single-code-point full folding when there is one, else lowercase
// (right for every code point with only a multi-character folding, e.g. U+1E9E -> U+00DF,
// except U+0130, which CaseFolding.txt leaves alone in simple folding).
char32_t SimpleFold(char32_t cp) {
  if (cp == 0x130) return cp;
  utf8proc_int32_t buf[4];
  int boundclass = 0;
  const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 4,
                                                     UTF8PROC_CASEFOLD, &boundclass);
  if (n == 1) return static_cast<char32_t>(buf[0]);
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

// Every code point whose simple case folding is shared with another one, as (fold, code point)
// pairs sorted by fold: the members of one equivalence class are adjacent. Built once.
const std::vector<std::pair<char32_t, char32_t>>& CaseOrbits() {
  static const auto* const orbits = [] {
    std::vector<std::pair<char32_t, char32_t>> pairs;
    // Cased letters end before U+1F18A (the last Other_Alphabetic letters with case mappings).
    for (char32_t cp = 0; cp < 0x1F200; ++cp) {
      const char32_t fold = SimpleFold(cp);
      if (fold != cp) {
        pairs.emplace_back(fold, cp);
        pairs.emplace_back(fold, fold);
      }
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    return new std::vector<std::pair<char32_t, char32_t>>(std::move(pairs));
  }();
  return *orbits;
}

// Every code point with a multi-character full case folding, as (folding, code point) sorted by
// folding. Built once.
const std::vector<std::pair<std::u32string, char32_t>>& MultiCharFolds() {
  static const auto* const folds = [] {
    auto* out = new std::vector<std::pair<std::u32string, char32_t>>();
    for (char32_t cp = 0; cp < 0x1F200; ++cp) {
      std::u32string fold = FullCaseFold(cp);
      if (fold.size() > 1) out->emplace_back(std::move(fold), cp);
    }
    std::sort(out->begin(), out->end());
    return out;
  }();
  return *folds;
}

std::string CanonicalName(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (c == ' ' || c == '_' || c == '-') continue;
    out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
  }
  return out;
}

// Category mask of a general-category name ("lu", "letter", "l", "l&"), 0 when unknown.
uint32_t CategoryMaskOf(const std::string& name) {
  static constexpr std::pair<const char*, uint32_t> kGroups[] = {
      {"l", kLetters}, {"letter", kLetters}, {"m", kMarks}, {"mark", kMarks},
      {"combiningmark", kMarks}, {"n", kNumbers}, {"number", kNumbers},
      {"p", kPunctuation}, {"punctuation", kPunctuation}, {"s", kSymbols},
      {"symbol", kSymbols}, {"z", kSeparators}, {"separator", kSeparators},
      {"c", kOthers}, {"other", kOthers},
      {"lc", CategoryBit(GeneralCategory::kLu) | CategoryBit(GeneralCategory::kLl) |
                 CategoryBit(GeneralCategory::kLt)},
      {"l&", CategoryBit(GeneralCategory::kLu) | CategoryBit(GeneralCategory::kLl) |
                 CategoryBit(GeneralCategory::kLt)},
      {"any", kAllCategories}, {"assigned", kAllCategories & ~CategoryBit(GeneralCategory::kCn)},
  };
  for (const auto& [group, mask] : kGroups) {
    if (name == group) return mask;
  }
  static constexpr const char* kShort[kNumGeneralCategories] = {
      "lu", "ll", "lt", "lm", "lo", "mn", "mc", "me", "nd", "nl", "no", "pc", "pd", "ps", "pe",
      "pi", "pf", "po", "sm", "sc", "sk", "so", "zs", "zl", "zp", "cc", "cf", "cs", "co", "cn"};
  static constexpr const char* kLong[kNumGeneralCategories] = {
      "uppercaseletter", "lowercaseletter", "titlecaseletter", "modifierletter", "otherletter",
      "nonspacingmark", "spacingmark", "enclosingmark", "decimalnumber", "letternumber",
      "othernumber", "connectorpunctuation", "dashpunctuation", "openpunctuation",
      "closepunctuation", "initialpunctuation", "finalpunctuation", "otherpunctuation",
      "mathsymbol", "currencysymbol", "modifiersymbol", "othersymbol", "spaceseparator",
      "lineseparator", "paragraphseparator", "control", "format", "surrogate", "privateuse",
      "unassigned"};
  for (int i = 0; i < kNumGeneralCategories; ++i) {
    if (name == kShort[i] || name == kLong[i]) return uint32_t{1} << i;
  }
  return 0;
}

CodePointSet AsciiSet(std::string_view members) {
  CodePointSet set;
  for (const char c : members) set.Add(static_cast<unsigned char>(c));
  return set;
}

// Alphabetic plus the marks: letters, Nl, M, and the Other_Alphabetic symbols (circled and
// squared Latin letters), which are the Other_Alphabetic code points outside M.
CodePointSet WordLetterSet() {
  CodePointSet set = CodePointSet::OfCategories(kLetters | CategoryBit(GeneralCategory::kNl) |
                                                kMarks);
  set.AddRange(0x24B6, 0x24E9);
  set.AddRange(0x1F130, 0x1F149);
  set.AddRange(0x1F150, 0x1F169);
  set.AddRange(0x1F170, 0x1F189);
  return set;
}

}  // namespace

std::u32string FullCaseFold(char32_t cp) {
  utf8proc_int32_t buf[4];
  int boundclass = 0;
  const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 4,
                                                     UTF8PROC_CASEFOLD, &boundclass);
  std::u32string out;
  for (utf8proc_ssize_t i = 0; i < n && i < 4; ++i) out.push_back(static_cast<char32_t>(buf[i]));
  if (out.empty()) out.push_back(cp);
  return out;
}

CodePointSet CodePointsFoldingTo(std::u32string_view fold) {
  CodePointSet set;
  const auto& folds = MultiCharFolds();
  auto it = std::lower_bound(
      folds.begin(), folds.end(), fold,
      [](const auto& entry, std::u32string_view f) { return entry.first < f; });
  std::vector<Range> members;
  for (; it != folds.end() && it->first == fold; ++it) members.emplace_back(it->second, it->second);
  return CodePointSet::FromRanges(std::move(members));
}

std::vector<std::u32string> MultiCharFoldsOf(const CodePointSet& set) {
  std::vector<std::u32string> out;
  for (const auto& [fold, cp] : MultiCharFolds()) {
    if ((out.empty() || out.back() != fold) && set.Contains(cp)) out.push_back(fold);
  }
  return out;
}

CodePointSet CodePointSet::OfCategories(uint32_t category_mask) {
  CodePointSet set;
  std::vector<Range> all;
  const auto& table = CategoryRanges();
  for (int i = 0; i < kNumGeneralCategories; ++i) {
    if (category_mask & (uint32_t{1} << i)) all.insert(all.end(), table[i].begin(), table[i].end());
  }
  std::sort(all.begin(), all.end());
  for (const Range& r : all) set.AddRange(r.first, r.second);  // appends: the fast path
  return set;
}

CodePointSet CodePointSet::FromRanges(std::vector<Range> ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodePointSet set;
  for (const Range& r : ranges) set.AddRange(r.first, r.second);  // appends: the fast path
  return set;
}

void CodePointSet::AddRange(char32_t lo, char32_t hi) {
  // Fast path: appending after the last range (the common case when building in order).
  if (ranges_.empty() || lo > ranges_.back().second + 1) {
    if (ranges_.empty() || lo > ranges_.back().first) {
      ranges_.emplace_back(lo, hi);
      return;
    }
  } else if (lo >= ranges_.back().first) {
    ranges_.back().second = std::max(ranges_.back().second, hi);
    return;
  }
  std::vector<Range> merged;
  merged.reserve(ranges_.size() + 1);
  bool placed = false;
  for (const Range& r : ranges_) {
    if (r.second + 1 < lo) {
      merged.push_back(r);
    } else if (hi + 1 < r.first) {
      if (!placed) merged.emplace_back(lo, hi);
      placed = true;
      merged.push_back(r);
    } else {
      lo = std::min(lo, r.first);
      hi = std::max(hi, r.second);
    }
  }
  if (!placed) merged.emplace_back(lo, hi);
  std::sort(merged.begin(), merged.end());
  ranges_ = std::move(merged);
}

void CodePointSet::AddSet(const CodePointSet& other) {
  if (other.ranges_.empty()) return;
  if (ranges_.empty()) {
    ranges_ = other.ranges_;
    return;
  }
  // Linear merge of two sorted range lists.
  std::vector<Range> merged;
  merged.reserve(ranges_.size() + other.ranges_.size());
  size_t i = 0, j = 0;
  while (i < ranges_.size() || j < other.ranges_.size()) {
    const bool take_mine = j == other.ranges_.size() ||
                           (i < ranges_.size() && ranges_[i].first <= other.ranges_[j].first);
    const Range r = take_mine ? ranges_[i++] : other.ranges_[j++];
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
}

void CodePointSet::Negate() {
  std::vector<Range> out;
  char32_t next = 0;
  for (const Range& r : ranges_) {
    if (r.first > next) out.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  ranges_ = std::move(out);
}

void CodePointSet::Intersect(const CodePointSet& other) {
  std::vector<Range> out;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    const char32_t lo = std::max(ranges_[i].first, other.ranges_[j].first);
    const char32_t hi = std::min(ranges_[i].second, other.ranges_[j].second);
    if (lo <= hi) out.emplace_back(lo, hi);
    if (ranges_[i].second < other.ranges_[j].second) ++i; else ++j;
  }
  ranges_ = std::move(out);
}

void CodePointSet::CloseOverCaseFolding() {
  const auto& orbits = CaseOrbits();
  if (ranges_.size() == 1 && ranges_[0].first == ranges_[0].second) {
    // One code point (a literal under (?i)): look its orbit up instead of scanning them all.
    const char32_t fold = SimpleFold(ranges_[0].first);
    auto it = std::lower_bound(orbits.begin(), orbits.end(), std::make_pair(fold, char32_t{0}));
    for (; it != orbits.end() && it->first == fold; ++it) Add(it->second);
    return;
  }
  std::vector<char32_t> added;
  for (size_t i = 0; i < orbits.size();) {
    size_t end = i;
    bool any = false;
    while (end < orbits.size() && orbits[end].first == orbits[i].first) {
      any = any || Contains(orbits[end].second);
      ++end;
    }
    if (any) {
      for (size_t k = i; k < end; ++k) added.push_back(orbits[k].second);
    }
    i = end;
  }
  std::sort(added.begin(), added.end());
  CodePointSet extra;
  for (const char32_t cp : added) extra.Add(cp);
  AddSet(extra);
}

bool CodePointSet::Contains(char32_t cp) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), cp,
                             [](char32_t v, const Range& r) { return v < r.first; });
  if (it == ranges_.begin()) return false;
  --it;
  return cp <= it->second;
}

CodePointSet SpaceSet() {
  CodePointSet set;
  set.AddRange(0x09, 0x0D);
  for (const char32_t cp : {0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}) {
    set.Add(cp);
  }
  set.AddRange(0x2000, 0x200A);
  return set;
}

CodePointSet DigitSet() { return CodePointSet::OfCategories(CategoryBit(GeneralCategory::kNd)); }

CodePointSet WordSet(bool latin1_numbers) {
  CodePointSet set = WordLetterSet();
  set.AddSet(CodePointSet::OfCategories(CategoryBit(GeneralCategory::kNd) |
                                        CategoryBit(GeneralCategory::kPc)));
  if (latin1_numbers) {
    CodePointSet numbers;
    for (char32_t cp = 0xB2; cp <= 0xBE; ++cp) {
      if (IsLatin1WordNumber(cp)) numbers.Add(cp);
    }
    set.AddSet(numbers);
  }
  return set;
}

CodePointSet HexDigitSet() { return AsciiSet("0123456789abcdefABCDEF"); }

bool IsWordChar(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  if (IsLatin1WordNumber(cp)) return true;
  const uint32_t bit = CategoryBit(CategoryOf(cp));
  if (bit & (kLetters | kMarks | CategoryBit(GeneralCategory::kNl) |
             CategoryBit(GeneralCategory::kNd) | CategoryBit(GeneralCategory::kPc))) {
    return true;
  }
  return (cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
         (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189);
}

bool LookupProperty(std::string_view raw_name, PropertySyntax syntax, CodePointSet* out) {
  const std::string name = CanonicalName(raw_name);
  if (const uint32_t mask = CategoryMaskOf(name); mask != 0) {
    *out = CodePointSet::OfCategories(mask);
    return true;
  }
  if (name == "digit") {
    *out = DigitSet();
  } else if (name == "space" || name == "whitespace") {
    *out = SpaceSet();
  } else if (name == "word") {
    *out = WordSet(syntax == PropertySyntax::kEscape);
  } else if (name == "punct") {
    *out = CodePointSet::OfCategories(
        syntax == PropertySyntax::kPosixBracket ? kPunctuation | kSymbols : kPunctuation);
  } else if (name == "cntrl") {
    *out = CodePointSet::OfCategories(CategoryBit(GeneralCategory::kCc));
  } else if (name == "blank") {
    *out = CodePointSet::OfCategories(CategoryBit(GeneralCategory::kZs));
    out->Add('\t');
  } else if (name == "xdigit") {
    *out = HexDigitSet();
  } else if (name == "ascii") {
    *out = CodePointSet();
    out->AddRange(0, 0x7F);
  } else {
    return false;
  }
  return true;
}

}  // namespace loom::text::regex_internal
