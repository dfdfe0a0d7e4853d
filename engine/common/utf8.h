// UTF-8 decoding and encoding, shared by the text layer (every text that reaches the tokenizer
// has passed through it, so ill-formed input never reaches a lookup table) and the JSON writer.
// Each maximal ill-formed subpart (Unicode §3.9, the rule Python's
// `bytes.decode("utf-8", "replace")` and WHATWG follow) becomes one U+FFFD. Pure functions; any
// thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace loom {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point that starts at text[pos] (pos < text.size()) and stores the number of
// bytes it spans in *len (1-4). An ill-formed sequence decodes to U+FFFD and *len covers its
// maximal subpart (at least one byte), so a loop that advances by *len always terminates.
char32_t DecodeUtf8(std::string_view text, size_t pos, size_t* len);

// Appends the UTF-8 encoding of `cp` (surrogates and values past U+10FFFF append U+FFFD).
void AppendUtf8(char32_t cp, std::string* out);

// True when `text` is well-formed UTF-8.
bool IsValidUtf8(std::string_view text);

// `text` with every maximal ill-formed subpart replaced by U+FFFD (unchanged when well-formed).
std::string SanitizeUtf8(std::string_view text);

// Length of the longest prefix of `text` that does not end inside an incomplete (but so far
// well-formed) multi-byte sequence: the bytes after it may still become a character once more
// bytes arrive. Ill-formed bytes count as complete (they will decode to U+FFFD either way).
size_t CompleteUtf8Prefix(std::string_view text);

}  // namespace loom
