#include "server/text/tokenizer/byte_level.h"

#include <array>

namespace loom::text {
namespace {

constexpr bool IsSelfMapped(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> byte_to_cp{};
  // UTF-8 encoding of each byte's code point (all are below U+0800: one or two bytes).
  std::array<std::array<char, 2>, 256> utf8{};
  std::array<uint8_t, 256> utf8_len{};
  // Inverse map for code points below U+0144 (-1: not a byte-level character).
  std::array<int16_t, 256 + 68> cp_to_byte{};
};

constexpr Tables BuildTables() {
  Tables t;
  int next = 0;
  for (auto& b : t.cp_to_byte) b = -1;
  for (int b = 0; b < 256; ++b) {
    t.byte_to_cp[b] =
        IsSelfMapped(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
    const char32_t cp = t.byte_to_cp[b];
    t.cp_to_byte[cp] = static_cast<int16_t>(b);
    if (cp < 0x80) {
      t.utf8[b] = {static_cast<char>(cp), 0};
      t.utf8_len[b] = 1;
    } else {
      t.utf8[b] = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      t.utf8_len[b] = 2;
    }
  }
  return t;
}

constexpr Tables kTables = BuildTables();

}  // namespace

void AppendByteLevel(std::string_view bytes, std::string* out) {
  for (unsigned char b : bytes) out->append(kTables.utf8[b].data(), kTables.utf8_len[b]);
}

int ByteLevelByte(char32_t cp) {
  return cp < kTables.cp_to_byte.size() ? kTables.cp_to_byte[cp] : -1;
}

}  // namespace loom::text
