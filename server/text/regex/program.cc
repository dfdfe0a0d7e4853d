#include "server/text/regex/program.h"

#include <algorithm>

namespace loom::text::regex_internal {

ClassTable::ClassTable(const CodePointSet& set) : bmp_(1024, 0) {
  for (const auto& [lo, hi] : set.ranges()) {
    if (lo >= 0x10000) {
      astral_.emplace_back(lo, hi);
      continue;
    }
    const char32_t bmp_hi = std::min<char32_t>(hi, 0xFFFF);
    char32_t cp = lo;
    for (; cp <= bmp_hi && (cp & 63) != 0; ++cp) bmp_[cp >> 6] |= uint64_t{1} << (cp & 63);
    for (; cp + 63 <= bmp_hi; cp += 64) bmp_[cp >> 6] = ~uint64_t{0};
    for (; cp <= bmp_hi; ++cp) bmp_[cp >> 6] |= uint64_t{1} << (cp & 63);
    if (hi > 0xFFFF) astral_.emplace_back(0x10000, hi);
  }
}

bool ClassTable::ContainsAstral(char32_t cp) const {
  auto it = std::upper_bound(astral_.begin(), astral_.end(), cp,
                             [](char32_t v, const CodePointSet::Range& r) { return v < r.first; });
  if (it == astral_.begin()) return false;
  --it;
  return cp <= it->second;
}

}  // namespace loom::text::regex_internal
