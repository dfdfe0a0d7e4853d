// The GPT-2 byte-to-character table used by the ByteLevel pre-tokenizer and decoder.
//
// Every byte maps to one printable code point: the bytes that are printable Latin-1 characters
// ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves, the other 68 bytes to U+0100
// onwards in byte order. Tables are built once at compile time; pure functions, any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom::text {

// Appends the byte-level form of `bytes` (each byte becomes its code point, UTF-8 encoded).
void AppendByteLevel(std::string_view bytes, std::string* out);

// The byte that code point `cp` stands for, or -1 when `cp` is not in the table.
int ByteLevelByte(char32_t cp);

}  // namespace loom::text
