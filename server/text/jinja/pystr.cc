#include "server/text/jinja/pystr.h"

#include <utf8proc.h>

#include "engine/common/utf8.h"

namespace loom::text::jinja::pystr {
namespace {

std::u32string Decode(std::string_view s) {
  std::u32string out;
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 1;
    out.push_back(DecodeUtf8(s, pos, &len));
    pos += len;
  }
  return out;
}

std::string Encode(std::u32string_view s) {
  std::string out;
  for (char32_t cp : s) AppendUtf8(cp, &out);
  return out;
}

bool IsCased(char32_t cp) {
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

char32_t ToUpper(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
char32_t ToLower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
char32_t ToTitle(char32_t cp) {
  if (cp < 0x80) return ToUpper(cp);
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

std::string Map(std::string_view s, char32_t (*f)(char32_t)) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 1;
    AppendUtf8(f(DecodeUtf8(s, pos, &len)), &out);
    pos += len;
  }
  return out;
}

}  // namespace

bool IsSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string text = Decode(s);
  const std::u32string set = chars ? Decode(*chars) : std::u32string();
  auto strip = [&](char32_t cp) {
    return chars ? set.find(cp) != std::u32string::npos : IsSpace(cp);
  };
  size_t begin = 0;
  size_t end = text.size();
  if (left) {
    while (begin < end && strip(text[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(text[end - 1])) --end;
  }
  return Encode(std::u32string_view(text).substr(begin, end - begin));
}

std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) return {std::string(s)};
    if (!from_right) {
      size_t start = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t at = s.find(*sep, start);
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, at - start));
        start = at + sep->size();
      }
      parts.emplace_back(s.substr(start));
      return parts;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    parts.emplace_back(s.substr(0, end));
    return {parts.rbegin(), parts.rend()};
  }
  const std::u32string text = Decode(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < text.size() && IsSpace(text[i])) ++i;
      if (i >= text.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.push_back(Encode(std::u32string_view(text).substr(i)));
        break;
      }
      size_t j = i;
      while (j < text.size() && !IsSpace(text[j])) ++j;
      parts.push_back(Encode(std::u32string_view(text).substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  size_t i = text.size();
  while (true) {
    while (i > 0 && IsSpace(text[i - 1])) --i;
    if (i == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      parts.push_back(Encode(std::u32string_view(text).substr(0, i)));
      break;
    }
    size_t j = i;
    while (j > 0 && !IsSpace(text[j - 1])) --j;
    parts.push_back(Encode(std::u32string_view(text).substr(j, i - j)));
    i = j;
  }
  return {parts.rbegin(), parts.rend()};
}

std::string Upper(std::string_view s) {
  // Python uses full case mappings; the one that matters in practice is U+00DF -> "SS".
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 1;
    const char32_t cp = DecodeUtf8(s, pos, &len);
    if (cp == 0xDF) {
      out.append("SS");
    } else {
      AppendUtf8(ToUpper(cp), &out);
    }
    pos += len;
  }
  return out;
}
std::string Lower(std::string_view s) { return Map(s, ToLower); }

std::string Capitalize(std::string_view s) {
  std::u32string text = Decode(s);
  for (size_t i = 0; i < text.size(); ++i) text[i] = i == 0 ? ToTitle(text[i]) : ToLower(text[i]);
  return Encode(text);
}

std::string Title(std::string_view s) {
  std::u32string text = Decode(s);
  bool previous_cased = false;
  for (char32_t& cp : text) {
    const bool cased = IsCased(cp);
    cp = previous_cased ? ToLower(cp) : ToTitle(cp);
    previous_cased = cased;
  }
  return Encode(text);
}

std::string JinjaTitle(std::string_view s) {
  // jinja2 splits before runs of `-`, whitespace and opening brackets, then upper-cases the
  // first character of each piece and lower-cases the rest.
  std::u32string text = Decode(s);
  auto is_boundary = [](char32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || IsSpace(cp);
  };
  bool start = true;
  for (char32_t& cp : text) {
    if (is_boundary(cp)) {
      start = true;
      continue;
    }
    cp = start ? ToUpper(cp) : ToLower(cp);
    start = false;
  }
  return Encode(text);
}

std::string Replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every character and at the end.
    int64_t done = 0;
    size_t pos = 0;
    while (pos <= s.size()) {
      if (count >= 0 && done >= count) {
        out.append(s.substr(pos));
        break;
      }
      out.append(replacement);
      ++done;
      if (pos == s.size()) break;
      size_t len = 1;
      DecodeUtf8(s, pos, &len);
      out.append(s.substr(pos, len));
      pos += len;
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(replacement);
    start = at + old.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

int64_t Find(std::string_view s, std::string_view sub, bool from_right) {
  const size_t at = from_right ? s.rfind(sub) : s.find(sub);
  if (at == std::string_view::npos) return -1;
  int64_t cps = 0;
  for (size_t i = 0; i < at; ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++cps;
  }
  return cps;
}

int64_t Count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(Decode(s).size()) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

std::vector<std::string> SplitLines(std::string_view s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 1;
    const char32_t cp = DecodeUtf8(s, pos, &len);
    const bool is_break = cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' ||
                          (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (is_break) {
      lines.emplace_back(s.substr(start, pos - start));
      if (cp == '\r' && pos + 1 < s.size() && s[pos + 1] == '\n') ++len;
      start = pos + len;
    }
    pos += len;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

bool IsLower(std::string_view s) {
  bool cased = false;
  for (char32_t cp : Decode(s)) {
    if (utf8proc_isupper(static_cast<utf8proc_int32_t>(cp)) ||
        utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_LT) {
      return false;
    }
    if (utf8proc_islower(static_cast<utf8proc_int32_t>(cp))) cased = true;
  }
  return cased;
}

bool IsUpper(std::string_view s) {
  bool cased = false;
  for (char32_t cp : Decode(s)) {
    if (utf8proc_islower(static_cast<utf8proc_int32_t>(cp)) ||
        utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_LT) {
      return false;
    }
    if (utf8proc_isupper(static_cast<utf8proc_int32_t>(cp))) cased = true;
  }
  return cased;
}

}  // namespace loom::text::jinja::pystr
