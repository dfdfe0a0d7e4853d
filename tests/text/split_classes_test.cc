// server/text/regex/split_classes: for every code point, the table's \p{L}, \p{N} and \s agree
// with what Oniguruma matches, and (?i) letters agree with onig's case-insensitive matching.
#include "server/text/regex/split_classes.h"

#include <string>
#include <utility>
#include <vector>

#include "engine/common/utf8.h"
#include "gtest/gtest.h"
#include "server/text/regex/regex.h"

namespace loom::text::regex_internal {
namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;

bool IsScalarValue(char32_t cp) { return cp < 0xD800 || (cp > 0xDFFF && cp <= 0x10FFFF); }

// Every Unicode scalar value once, in order, and the byte offset each starts at.
std::string AllCodePoints(std::vector<std::pair<size_t, char32_t>>* starts) {
  std::string text;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (!IsScalarValue(cp)) continue;
    starts->emplace_back(text.size(), cp);
    AppendUtf8(cp, &text);
  }
  return text;
}

// The table's bit for each code point against onig matching `pattern` (one code point) there.
void ExpectClassAgrees(const char* pattern, uint8_t bit) {
  absl::StatusOr<Regex> regex = Regex::CompileWithoutFastPath(pattern);
  ASSERT_TRUE(regex.ok()) << regex.status();
  std::vector<std::pair<size_t, char32_t>> starts;
  const std::string text = AllCodePoints(&starts);
  Spans spans;
  regex->FindAll(text, &spans);
  std::vector<bool> matched(text.size() + 1, false);
  for (const auto& [begin, end] : spans) matched[begin] = true;
  const SplitClasses& classes = SplitClasses::Get();
  int num_in_class = 0;
  int num_mismatches = 0;
  for (const auto& [offset, cp] : starts) {
    const bool in_table = (classes.Of(cp) & bit) != 0;
    num_in_class += in_table;
    if (in_table != matched[offset] && ++num_mismatches <= 10) {
      ADD_FAILURE() << pattern << " U+" << std::hex << static_cast<uint32_t>(cp) << ": onig "
                    << matched[offset] << ", table " << in_table;
    }
  }
  EXPECT_EQ(num_mismatches, 0) << pattern;
  EXPECT_GT(num_in_class, 0) << pattern;  // a table of zeros would agree with nothing matched
}

TEST(SplitClassesTest, LettersAgreeWithOniguruma) { ExpectClassAgrees(R"(\p{L})", kLetterBit); }
TEST(SplitClassesTest, NumbersAgreeWithOniguruma) { ExpectClassAgrees(R"(\p{N})", kNumberBit); }
TEST(SplitClassesTest, SpacesAgreeWithOniguruma) { ExpectClassAgrees(R"(\s)", kSpaceBit); }

TEST(SplitClassesTest, SpotChecks) {
  ASSERT_TRUE(Regex::Compile("x").ok());  // initializes Oniguruma
  const SplitClasses& classes = SplitClasses::Get();
  EXPECT_EQ(classes.Of('a'), kLetterBit);
  EXPECT_EQ(classes.Of(U'\u4E2D'), kLetterBit);
  EXPECT_EQ(classes.Of('7'), kNumberBit);
  EXPECT_EQ(classes.Of(U'\u00BD'), kNumberBit);  // ½ (No)
  EXPECT_EQ(classes.Of(U'\u2167'), kNumberBit);  // Ⅷ (Nl)
  EXPECT_EQ(classes.Of(' '), kSpaceBit);
  EXPECT_EQ(classes.Of(U'\u0085'), kSpaceBit);
  EXPECT_EQ(classes.Of(U'\u3000'), kSpaceBit);
  EXPECT_EQ(classes.Of(U'\u200B'), 0);  // zero width space is not White_Space
  EXPECT_EQ(classes.Of(U'\u0301'), 0);  // a combining mark is not \p{L}
  EXPECT_EQ(classes.Of(0x110000), 0);
}

// Each (?i) letter against onig's (?i:x) on every code point.
TEST(SplitClassesTest, CaseFoldsAgreeWithOniguruma) {
  std::vector<std::pair<size_t, char32_t>> starts;
  const std::string text = AllCodePoints(&starts);
  const SplitClasses& classes = SplitClasses::Get();
  for (const char letter : std::string("strevmld")) {
    absl::StatusOr<Regex> regex =
        Regex::CompileWithoutFastPath(std::string("(?i:") + letter + ")");
    ASSERT_TRUE(regex.ok()) << regex.status();
    Spans spans;
    regex->FindAll(text, &spans);
    std::vector<char32_t> onig;
    for (const auto& [begin, end] : spans) {
      size_t len = 0;
      onig.push_back(DecodeUtf8(text, begin, &len));
      EXPECT_EQ(len, end - begin) << letter;  // one code point per match
    }
    std::vector<char32_t> table;
    for (const auto& [offset, cp] : starts) {
      if (classes.FoldsTo(cp, letter)) table.push_back(cp);
    }
    EXPECT_EQ(table, onig) << letter;
  }
  EXPECT_TRUE(classes.FoldsTo(U'\u017F', 's'));  // ſ
  EXPECT_TRUE(classes.FoldsTo('S', 's'));
  EXPECT_FALSE(classes.FoldsTo('t', 's'));
}

}  // namespace
}  // namespace loom::text::regex_internal
