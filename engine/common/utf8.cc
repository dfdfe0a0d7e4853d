#include "engine/common/utf8.h"

#include <cstdint>

namespace loom {
namespace {

// Length of a sequence from its lead byte; 0 for bytes that cannot start one.
int SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// The allowed range of the byte after `lead` (Unicode Table 3-7); later bytes are 80..BF.
bool SecondByteOk(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

// Number of bytes of the well-formed prefix of the sequence at text[pos] (its maximal subpart
// when ill-formed), and whether the sequence is complete.
size_t ScanSequence(std::string_view text, size_t pos, bool* complete) {
  const uint8_t lead = static_cast<uint8_t>(text[pos]);
  const int need = SequenceLength(lead);
  *complete = need != 0;
  if (need <= 1) return 1;
  size_t n = 1;
  while (n < static_cast<size_t>(need)) {
    if (pos + n >= text.size()) {
      *complete = false;
      return n;
    }
    const uint8_t b = static_cast<uint8_t>(text[pos + n]);
    const bool ok = n == 1 ? SecondByteOk(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *complete = false;
      return n;
    }
    ++n;
  }
  return n;
}

}  // namespace

char32_t DecodeUtf8(std::string_view text, size_t pos, size_t* len) {
  bool complete = false;
  const size_t n = ScanSequence(text, pos, &complete);
  *len = n;
  if (!complete) return kReplacementChar;
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[pos + i]); };
  switch (n) {
    case 1: return byte(0);
    case 2: return (char32_t{byte(0) & 0x1Fu} << 6) | (byte(1) & 0x3Fu);
    case 3:
      return (char32_t{byte(0) & 0x0Fu} << 12) | (char32_t{byte(1) & 0x3Fu} << 6) |
             (byte(2) & 0x3Fu);
    default:
      return (char32_t{byte(0) & 0x07u} << 18) | (char32_t{byte(1) & 0x3Fu} << 12) |
             (char32_t{byte(2) & 0x3Fu} << 6) | (byte(3) & 0x3Fu);
  }
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacementChar;
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    bool complete = false;
    pos += ScanSequence(text, pos, &complete);
    if (!complete) return false;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view text) {
  if (IsValidUtf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t pos = 0; pos < text.size();) {
    size_t len = 0;
    AppendUtf8(DecodeUtf8(text, pos, &len), &out);
    pos += len;
  }
  return out;
}

size_t CompleteUtf8Prefix(std::string_view text) {
  // Only the last (at most 3) bytes can belong to an unfinished sequence.
  const size_t start = text.size() > 3 ? text.size() - 3 : 0;
  for (size_t pos = start; pos < text.size(); ++pos) {
    const uint8_t b = static_cast<uint8_t>(text[pos]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: not a sequence start
    bool complete = false;
    const size_t n = ScanSequence(text, pos, &complete);
    if (!complete && pos + n == text.size() && SequenceLength(b) > 1) return pos;
  }
  return text.size();
}

}  // namespace loom
