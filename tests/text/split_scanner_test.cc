// server/text/regex/split_scanner: the hand-written scanners give exactly Oniguruma's spans for
// their patterns. Differential: hand-picked and random / adversarial texts (every Unicode
// category, \r\n runs, apostrophes with case variants and folds, digit runs, mixed whitespace)
// through Regex::Compile (the scanner) and Regex::CompileWithoutFastPath (Oniguruma).
#include "server/text/regex/split_scanner.h"

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/common/utf8.h"
#include "gtest/gtest.h"
#include "server/text/regex/regex.h"

namespace loom::text::regex_internal {
namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;

constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kPatterns[] = {kGpt2, kLlama3, kQwen2};

// Both engines for one pattern.
struct Pair {
  Regex fast, onig;
};

Pair Compile(const char* pattern) {
  absl::StatusOr<Regex> fast = Regex::Compile(pattern);
  absl::StatusOr<Regex> onig = Regex::CompileWithoutFastPath(pattern);
  EXPECT_TRUE(fast.ok() && onig.ok());
  return Pair{fast.ok() ? *fast : Regex(), onig.ok() ? *onig : Regex()};
}

// Compares the spans of both engines on `text`; returns whether they agree.
bool Agree(const Pair& pair, const std::string& text, const char* pattern) {
  Spans fast, onig;
  pair.fast.FindAll(text, &fast);
  pair.onig.FindAll(text, &onig);
  EXPECT_EQ(fast, onig) << pattern << " on \"" << text << "\"";
  return fast == onig;
}

TEST(SplitScannerTest, OnlyTheExactPatternsHaveAScanner) {
  ASSERT_TRUE(Regex::Compile("x").ok());  // initializes Oniguruma
  for (const char* pattern : kPatterns) EXPECT_NE(FindSplitScanner(pattern), nullptr) << pattern;
  EXPECT_EQ(FindSplitScanner(""), nullptr);
  EXPECT_EQ(FindSplitScanner(std::string(kGpt2) + "|x"), nullptr);
  EXPECT_EQ(FindSplitScanner(std::string("(?:") + kLlama3 + ")"), nullptr);
  EXPECT_EQ(FindSplitScanner(R"(\p{N}{1,3})"), nullptr);
}

// The scanner is really used: hand-picked spans of each pattern.
TEST(SplitScannerTest, KnownSpans) {
  ASSERT_TRUE(Regex::Compile("x").ok());
  const std::string text = "He's  1234 'LL\r\n\r\n  x!!\n";
  Spans spans;
  FindSplitScanner(kGpt2)(text, &spans);
  // "He" "'s" " " " 1234" " '" "LL" "\r\n\r\n " " x" "!!" "\n"
  EXPECT_EQ(spans, (Spans{{0, 2}, {2, 4}, {4, 5}, {5, 10}, {10, 12}, {12, 14}, {14, 19},
                          {19, 21}, {21, 23}, {23, 24}}));
  spans.clear();
  FindSplitScanner(kLlama3)(text, &spans);
  // "He" "'s" " " " " "123" "4" " '" "LL" "\r\n\r\n" " " " x" "!!\n"
  EXPECT_EQ(spans, (Spans{{0, 2}, {2, 4}, {4, 5}, {5, 6}, {6, 9}, {9, 10}, {10, 12}, {12, 14},
                          {14, 18}, {18, 19}, {19, 21}, {21, 24}}));
  spans.clear();
  FindSplitScanner(kQwen2)("1234", &spans);
  EXPECT_EQ(spans, (Spans{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
}

// Pieces a random text is made of: each Unicode category, contractions with case variants and
// the code points onig folds onto ASCII letters (ſ, K), line break runs, whitespace of every kind.
const std::vector<std::string>& Pieces() {
  static const std::vector<std::string>* const pieces = new std::vector<std::string>{
      "a", "Z", "hello", "WORLD", "é", "ß", "ǅ", "ʰ", "中文", "ひらがな", "한국어", "Ωμέγα",
      "привет", "ا", "क", "ि", "\u0301", "\u200D", "\u00AD", "\uFEFF", "\u200B",
      "0", "7", "12345", "٣", "１", "Ⅻ", "²", "½", "𝟘",
      " ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\r\r\n", "\v", "\f", "\u0085", "\u00A0",
      "\u1680", "\u2000", "\u2009", "\u2028", "\u2029", "\u202F", "\u205F", "\u3000",
      "'", "'s", "'S", "'ſ", "'t", "'T", "'re", "'RE", "'rE", "'ve", "'VE", "'m", "'M", "'ll",
      "'LL", "'lL", "'d", "'D", "'K", "'ﬅ", "'st", "’s", "\"", "!", ".", "...", "(", "-", "_",
      "€", "∑", "😀", "👍🏽", "\x01", "\x7F", "\uE000", "\U0010FFFF", "\U0001F600", "\U000E0001",
  };
  return *pieces;
}

// A random scalar value, uniform over the ranges below (every plane that has characters).
char32_t RandomCodePoint(std::mt19937& rng) {
  static constexpr std::pair<char32_t, char32_t> kRanges[] = {
      {0x0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
  const auto& [low, high] = kRanges[rng() % 5];
  return low + static_cast<char32_t>(rng() % (high - low + 1));
}

std::string RandomText(std::mt19937& rng) {
  std::string text;
  const int num_pieces = static_cast<int>(rng() % 24);
  for (int i = 0; i < num_pieces; ++i) {
    const uint32_t choice = rng() % 10;
    if (choice < 7) {
      text += Pieces()[rng() % Pieces().size()];
    } else if (choice < 9) {
      AppendUtf8(RandomCodePoint(rng), &text);
    } else {
      // A run of one piece: long digit, whitespace and line break runs.
      const std::string& piece = Pieces()[rng() % Pieces().size()];
      for (uint32_t n = rng() % 9; n > 0; --n) text += piece;
    }
  }
  return text;
}

TEST(SplitScannerTest, RandomTextsAgreeWithOniguruma) {
  std::mt19937 rng(20261125);
  for (const char* pattern : kPatterns) {
    const Pair pair = Compile(pattern);
    int num_failures = 0;
    for (int i = 0; i < 20000 && num_failures < 5; ++i) {
      num_failures += !Agree(pair, RandomText(rng), pattern);
    }
    EXPECT_EQ(num_failures, 0) << pattern;
  }
}

// Every text of up to three pieces from a small adversarial alphabet.
TEST(SplitScannerTest, AllShortCombinationsAgreeWithOniguruma) {
  const std::vector<std::string> alphabet = {
      "a", "S", "ſ", "'", "1", "½", " ", "\t", "\r", "\n", "\u00A0", "!", "\u0301", "😀", ""};
  for (const char* pattern : kPatterns) {
    const Pair pair = Compile(pattern);
    int num_failures = 0;
    for (const std::string& a : alphabet) {
      for (const std::string& b : alphabet) {
        for (const std::string& c : alphabet) {
          for (const std::string& d : alphabet) {
            num_failures += !Agree(pair, a + b + c + d, pattern);
            if (num_failures >= 5) return;
          }
        }
      }
    }
  }
}

// Every code point in a few contexts (after a space, an apostrophe and itself, before a digit),
// so that no class or fold difference hides (split_classes_test checks the classes alone, on
// every code point).
TEST(SplitScannerTest, EveryCodePointAgreesWithOniguruma) {
  for (const char* pattern : kPatterns) {
    const Pair pair = Compile(pattern);
    std::string text;
    for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      // Past the first three planes (almost all unassigned or private use), a sample.
      if (cp >= 0x30000 && cp % 7 != 0) continue;
      std::string c;
      AppendUtf8(cp, &c);
      text += " " + c + "'" + c + c + "1\n";
    }
    EXPECT_TRUE(Agree(pair, text, pattern)) << pattern;
  }
}

// A whitespace run long enough to exhaust Oniguruma's retry limit in \s*[\r\n]+ (onig then
// reports no further matches): the scanner declines such a text and Regex gives onig's spans.
TEST(SplitScannerTest, LongSpaceRunsAgreeWithOniguruma) {
  ASSERT_TRUE(Regex::Compile("x").ok());
  const std::string long_run = "a" + std::string(size_t{12} << 20, ' ') + "b";
  for (const char* pattern : kPatterns) {
    Spans spans;
    EXPECT_FALSE(FindSplitScanner(pattern)(long_run, &spans));
    EXPECT_TRUE(spans.empty());
    const Pair pair = Compile(pattern);
    Agree(pair, long_run, pattern);
    // A run one byte short of the bound: still scanned, and still onig's spans.
    const std::string short_run =
        "x\n" + std::string(kMaxExactSpaceRunBytes - 3, ' ') + "\n" + "y";
    EXPECT_TRUE(FindSplitScanner(pattern)(short_run, &spans));
    Agree(pair, short_run, pattern);
  }
}

// Ill-formed UTF-8 reads as '~' in both.
TEST(SplitScannerTest, IllFormedBytesAgreeWithOniguruma) {
  for (const char* pattern : kPatterns) {
    const Pair pair = Compile(pattern);
    for (const std::string& text : {std::string("a\xFF"
                                               "b"),
                                   std::string("'\xC3"), std::string(" \xE4\xB8 x\xF0\x9F\x98"),
                                   std::string("\x80\x80 1\xED\xA0\x80")}) {
      Agree(pair, text, pattern);
    }
  }
}

}  // namespace
}  // namespace loom::text::regex_internal
