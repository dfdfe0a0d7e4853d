// Python `str` operations on UTF-8 text, shared by string methods and filters: what a template's
// `s.strip()`, `s.split(',')` or `s|title` must return to match Python. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::text::jinja::pystr {

// str.isspace() for one code point.
bool IsSpace(char32_t cp);

// str.strip / lstrip / rstrip; `chars` unset strips whitespace.
std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);

// str.split / rsplit; `sep` unset splits on whitespace runs; maxsplit < 0: no limit. An empty
// `sep` is the caller's error to report.
std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right);

// str.upper / lower (simple Unicode case mapping), str.capitalize, str.title, jinja2's title.
std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
std::string Capitalize(std::string_view s);
std::string Title(std::string_view s);
std::string JinjaTitle(std::string_view s);

// str.replace with an optional count (< 0: all).
std::string Replace(std::string_view s, std::string_view old, std::string_view replacement,
                    int64_t count);

// str.find / rfind in code points (-1 when missing) and str.count (non-overlapping).
int64_t Find(std::string_view s, std::string_view sub, bool from_right);
int64_t Count(std::string_view s, std::string_view sub);

// str.splitlines() (without keepends): splits at \n, \r, \r\n, \v, \f, \x1c-\x1e, U+0085,
// U+2028 and U+2029.
std::vector<std::string> SplitLines(std::string_view s);

// str.islower / isupper: has a cased character and no character of the other case.
bool IsLower(std::string_view s);
bool IsUpper(std::string_view s);

}  // namespace loom::text::jinja::pystr
