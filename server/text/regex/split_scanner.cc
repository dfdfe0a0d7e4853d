#include "server/text/regex/split_scanner.h"

#include <cstdint>

#include "server/text/regex/split_classes.h"

namespace loom::text::regex_internal {

namespace {

constexpr size_t kNoMatch = std::string_view::npos;

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The contractions, in the patterns' order (none is a prefix of another, so the order does not
// change which one matches).
constexpr std::string_view kContractions[] = {"s", "t", "re", "ve", "m", "ll", "d"};

bool IsLetter(uint8_t bits) { return (bits & kLetterBit) != 0; }
bool IsNumber(uint8_t bits) { return (bits & kNumberBit) != 0; }
bool IsSpace(uint8_t bits) { return (bits & kSpaceBit) != 0; }
// [^\s\p{L}\p{N}]
bool IsOther(uint8_t bits) { return (bits & (kLetterBit | kNumberBit | kSpaceBit)) == 0; }
bool IsLineBreak(char c) { return c == '\r' || c == '\n'; }

// The text being scanned, with its code points' classes.
class Scan {
 public:
  explicit Scan(std::string_view text) : text_(text), classes_(SplitClasses::Get()) {}

  size_t size() const { return text_.size(); }
  char byte(size_t pos) const { return text_[pos]; }

  // The code point at `pos` (< size(); the text is well-formed) and its length in bytes.
  char32_t CodePointAt(size_t pos, size_t* len) const {
    const auto* p = reinterpret_cast<const uint8_t*>(text_.data()) + pos;
    if (p[0] < 0x80) {
      *len = 1;
      return p[0];
    }
    if (p[0] < 0xE0) {
      *len = 2;
      return (char32_t{p[0] & 0x1Fu} << 6) | (p[1] & 0x3Fu);
    }
    if (p[0] < 0xF0) {
      *len = 3;
      return (char32_t{p[0] & 0x0Fu} << 12) | (char32_t{p[1] & 0x3Fu} << 6) | (p[2] & 0x3Fu);
    }
    *len = 4;
    return (char32_t{p[0] & 0x07u} << 18) | (char32_t{p[1] & 0x3Fu} << 12) |
           (char32_t{p[2] & 0x3Fu} << 6) | (p[3] & 0x3Fu);
  }

  // The class bits of the code point at `pos` (< size()) and its length in bytes.
  uint8_t ClassAt(size_t pos, size_t* len) const { return classes_.Of(CodePointAt(pos, len)); }

  // The end of the run of code points from `pos` whose class satisfies `in_run`.
  template <typename Pred>
  size_t RunEnd(size_t pos, Pred in_run) const {
    while (pos < size()) {
      size_t len = 0;
      if (!in_run(ClassAt(pos, &len))) break;
      pos += len;
    }
    return pos;
  }

  // ` ?X+` at `pos`, X given by `in_run`: the optional space is greedy, so a space followed by
  // an X is taken; otherwise the X run must start at `pos` itself.
  template <typename Pred>
  size_t SpaceThenRun(size_t pos, Pred in_run) const {
    size_t len = 0;
    if (byte(pos) == ' ' && pos + 1 < size() && in_run(ClassAt(pos + 1, &len))) {
      return RunEnd(pos + 1 + len, in_run);
    }
    if (in_run(ClassAt(pos, &len))) return RunEnd(pos + len, in_run);
    return kNoMatch;
  }

  // '(s|t|re|ve|m|ll|d) at `pos`, case-sensitive or under (?i).
  size_t Contraction(size_t pos, bool ignore_case) const {
    if (byte(pos) != '\'') return kNoMatch;
    for (std::string_view suffix : kContractions) {
      size_t end = pos + 1;
      bool matched = true;
      for (const char letter : suffix) {
        if (end >= size()) {
          matched = false;
          break;
        }
        size_t len = 1;
        const char32_t cp = ignore_case ? CodePointAt(end, &len) : static_cast<uint8_t>(byte(end));
        if (ignore_case ? !classes_.FoldsTo(cp, letter) : cp != static_cast<char32_t>(letter)) {
          matched = false;
          break;
        }
        end += len;
      }
      if (matched) return end;
    }
    return kNoMatch;
  }

  // `\s+(?!\S)|\s+` at `pos`, where [pos, run_end) is the whitespace run there (non-empty).
  // \s+ first takes the whole run; (?!\S) then holds only at the end of the text, since a
  // non-space follows the run. Giving back the run's last code point puts a space after the
  // match, which satisfies it if some space is left. With a single space neither works and
  // the plain \s+ takes it.
  size_t WhitespaceEnd(size_t pos, size_t run_end) const {
    if (run_end == size()) return run_end;
    size_t last = run_end - 1;
    while ((static_cast<uint8_t>(byte(last)) & 0xC0) == 0x80) --last;
    return last > pos ? last : run_end;
  }

  // `\s*[\r\n]+` at `pos`, [pos, run_end) being the whitespace run there: the greedy \s* gives
  // back code points until a line break follows it, so the match ends just after the run's last
  // line break (a single one: the code point after it is not a line break). None: no match.
  // \r and \n are ASCII, so a byte-wise search never lands inside a multi-byte code point.
  size_t LineBreakEnd(size_t pos, size_t run_end) const {
    for (size_t end = run_end; end > pos; --end) {
      if (IsLineBreak(byte(end - 1))) return end;
    }
    return kNoMatch;
  }

 private:
  std::string_view text_;
  const SplitClasses& classes_;
};

// Whether `text` has a whitespace run of kMaxExactSpaceRunBytes or more. Only a text that long
// can have one, so the common case costs one comparison.
bool HasLongSpaceRun(std::string_view text) {
  if (text.size() < kMaxExactSpaceRunBytes) return false;
  const Scan scan(text);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    if (IsSpace(scan.ClassAt(pos, &len))) {
      const size_t run_end = scan.RunEnd(pos + len, IsSpace);
      if (run_end - pos >= kMaxExactSpaceRunBytes) return true;
      pos = run_end;
    } else {
      pos += len;
    }
  }
  return false;
}

// The end of the GPT-2 pattern's match at `pos`, or kNoMatch.
size_t Gpt2MatchAt(const Scan& scan, size_t pos) {
  size_t end = scan.Contraction(pos, /*ignore_case=*/false);
  if (end != kNoMatch) return end;
  if ((end = scan.SpaceThenRun(pos, IsLetter)) != kNoMatch) return end;
  if ((end = scan.SpaceThenRun(pos, IsNumber)) != kNoMatch) return end;
  if ((end = scan.SpaceThenRun(pos, IsOther)) != kNoMatch) return end;
  size_t len = 0;
  if (!IsSpace(scan.ClassAt(pos, &len))) return kNoMatch;
  return scan.WhitespaceEnd(pos, scan.RunEnd(pos + len, IsSpace));
}

// The end of the Llama 3 (max_digits 3) or Qwen2 (max_digits 1) pattern's match at `pos`, or
// kNoMatch.
size_t LlamaMatchAt(const Scan& scan, size_t pos, int max_digits) {
  size_t end = scan.Contraction(pos, /*ignore_case=*/true);
  if (end != kNoMatch) return end;
  size_t len = 0;
  const uint8_t bits = scan.ClassAt(pos, &len);
  const char first = scan.byte(pos);
  // [^\r\n\p{L}\p{N}]?\p{L}+: a letter cannot be the optional prefix, so a letter starts the
  // run itself; any other allowed code point is the prefix when a letter follows it.
  if (IsLetter(bits)) return scan.RunEnd(pos + len, IsLetter);
  if (!IsNumber(bits) && !IsLineBreak(first) && pos + len < scan.size()) {
    size_t next_len = 0;
    if (IsLetter(scan.ClassAt(pos + len, &next_len))) {
      return scan.RunEnd(pos + len + next_len, IsLetter);
    }
  }
  // \p{N}{1,3} / \p{N}
  if (IsNumber(bits)) {
    end = pos + len;
    for (int digits = 1; digits < max_digits && end < scan.size(); ++digits) {
      size_t next_len = 0;
      if (!IsNumber(scan.ClassAt(end, &next_len))) break;
      end += next_len;
    }
    return end;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]* (nothing after the run constrains the greedy parts)
  if ((end = scan.SpaceThenRun(pos, IsOther)) != kNoMatch) {
    while (end < scan.size() && IsLineBreak(scan.byte(end))) ++end;
    return end;
  }
  if (!IsSpace(bits)) return kNoMatch;
  const size_t run_end = scan.RunEnd(pos + len, IsSpace);
  // \s*[\r\n]+, then \s+(?!\S)|\s+
  if ((end = scan.LineBreakEnd(pos, run_end)) != kNoMatch) return end;
  return scan.WhitespaceEnd(pos, run_end);
}

// Leftmost matches, left to right. No alternative matches empty, so each search resumes where
// the last match ended; a position where nothing matches (none with these patterns, whose
// alternatives cover every code point) is stepped over. False (matches unchanged) when a
// whitespace run is too long to be sure of Oniguruma's result (split_scanner.h).
template <typename MatchAt>
bool ScanAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches,
             MatchAt match_at) {
  if (HasLongSpaceRun(text)) return false;
  const Scan scan(text);
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = match_at(scan, pos);
    if (end == kNoMatch) {
      size_t len = 0;
      scan.CodePointAt(pos, &len);
      pos += len;
      continue;
    }
    matches->emplace_back(pos, end);
    pos = end;
  }
  return true;
}

bool ScanGpt2(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) {
  return ScanAll(text, matches, Gpt2MatchAt);
}

bool ScanLlama3(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) {
  return ScanAll(text, matches, [](const Scan& scan, size_t pos) { return LlamaMatchAt(scan, pos, 3); });
}

bool ScanQwen2(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) {
  return ScanAll(text, matches, [](const Scan& scan, size_t pos) { return LlamaMatchAt(scan, pos, 1); });
}

struct ScannerEntry {
  std::string_view pattern;
  SplitScanFn scan;
};

constexpr ScannerEntry kScanners[] = {
    {kGpt2Pattern, ScanGpt2},
    {kLlama3Pattern, ScanLlama3},
    {kQwen2Pattern, ScanQwen2},
};

}  // namespace

SplitScanFn FindSplitScanner(std::string_view pattern) {
  for (const ScannerEntry& entry : kScanners) {
    if (entry.pattern == pattern) {
      SplitClasses::Get();  // build the tables now rather than during the first FindAll
      return entry.scan;
    }
  }
  return nullptr;
}

}  // namespace loom::text::regex_internal
