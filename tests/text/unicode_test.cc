// Tests of server/text/unicode/unicode.h: unit cases, and a golden comparison with Python's
// unicodedata and str.lower (tests/text/fixtures/regex/unicode.json, written by
// tests/text/make_regex_fixtures.py). Python's Unicode version (14.0 when written) is older than
// utf8proc's (15.0), so the category comparison covers only code points Python has assigned.
#include "server/text/unicode/unicode.h"

#include <string>

#include "engine/common/file.h"
#include "engine/common/json.h"
#include "gtest/gtest.h"

namespace loom::text {
namespace {

absl::StatusOr<Json> LoadFixture() {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/tests/text/fixtures/regex/unicode.json";
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return Json::Parse(*text, path);
}

GeneralCategory CategoryNamed(const std::string& name) {
  static constexpr const char* kNames[kNumGeneralCategories] = {
      "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
      "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
  for (int i = 0; i < kNumGeneralCategories; ++i) {
    if (name == kNames[i]) return static_cast<GeneralCategory>(i);
  }
  ADD_FAILURE() << "unknown category " << name;
  return GeneralCategory::kCn;
}

TEST(UnicodeTest, CategoriesOfSampleCodePoints) {
  EXPECT_EQ(CategoryOf('A'), GeneralCategory::kLu);
  EXPECT_EQ(CategoryOf('z'), GeneralCategory::kLl);
  EXPECT_EQ(CategoryOf('7'), GeneralCategory::kNd);
  EXPECT_EQ(CategoryOf(' '), GeneralCategory::kZs);
  EXPECT_EQ(CategoryOf('\n'), GeneralCategory::kCc);
  EXPECT_EQ(CategoryOf(0xAD), GeneralCategory::kCf);   // soft hyphen
  EXPECT_EQ(CategoryOf(0x01C5), GeneralCategory::kLt);  // Dž
  EXPECT_EQ(CategoryOf(0x0301), GeneralCategory::kMn);
  EXPECT_EQ(CategoryOf(0x4E2D), GeneralCategory::kLo);  // 中
  EXPECT_EQ(CategoryOf(0x1F600), GeneralCategory::kSo);
  EXPECT_EQ(CategoryOf(0xD800), GeneralCategory::kCs);
  EXPECT_EQ(CategoryOf(0xE000), GeneralCategory::kCo);
  EXPECT_EQ(CategoryOf(0x0378), GeneralCategory::kCn);
  EXPECT_EQ(CategoryOf(0x110000), GeneralCategory::kCn);
}

TEST(UnicodeTest, WhitespaceIsTheWhiteSpaceProperty) {
  for (const char32_t cp : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000,
                            0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}) {
    EXPECT_TRUE(IsWhitespace(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
  // Not White_Space although Python's str.isspace says so (\x1c-\x1f) or they look blank.
  for (const char32_t cp : {0x1C, 0x1F, 0x200B, 0x180E, 0xFEFF, 0x2060, 0x61, 0x00}) {
    EXPECT_FALSE(IsWhitespace(cp)) << std::hex << static_cast<uint32_t>(cp);
  }
}

TEST(UnicodeTest, NormalizesAllFourForms) {
  EXPECT_EQ(Normalize("e\xCC\x81", NormalizationForm::kNfc), "\xC3\xA9");
  EXPECT_EQ(Normalize("\xC3\xA9", NormalizationForm::kNfd), "e\xCC\x81");
  EXPECT_EQ(Normalize("\xEF\xAC\x81", NormalizationForm::kNfkc), "fi");       // ﬁ
  EXPECT_EQ(Normalize("\xEF\xAC\x81", NormalizationForm::kNfc), "\xEF\xAC\x81");
  EXPECT_EQ(Normalize("\xE2\x91\xA0", NormalizationForm::kNfkd), "1");        // ①
  EXPECT_EQ(Normalize("plain ascii", NormalizationForm::kNfkd), "plain ascii");
  EXPECT_EQ(Normalize("", NormalizationForm::kNfc), "");
}

TEST(UnicodeTest, LowercasesLikeRust) {
  EXPECT_EQ(ToLowerCase("Hello WORLD"), "hello world");
  EXPECT_EQ(ToLowerCase("\xC4\xB0"), "i\xCC\x87");  // İ -> i + combining dot above
  // Final sigma: ΣΑΣ -> σας; a lone Σ stays σ.
  EXPECT_EQ(ToLowerCase("\xCE\xA3\xCE\x91\xCE\xA3"), "\xCF\x83\xCE\xB1\xCF\x82");
  EXPECT_EQ(ToLowerCase("\xCE\xA3"), "\xCF\x83");
  EXPECT_EQ(ToLowerCase("\xD0\x81\xD0\x96"), "\xD1\x91\xD0\xB6");  // ЁЖ
}

TEST(UnicodeTest, CategoriesMatchPythonOnEveryAssignedCodePoint) {
  const absl::StatusOr<Json> fixture = LoadFixture();
  ASSERT_TRUE(fixture.ok()) << fixture.status();
  const Json runs = *fixture->Get("categories");
  ASSERT_GT(runs.size(), 3000u);
  size_t checked = 0, mismatches = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto first = static_cast<char32_t>(*runs[i][0].AsInt());
    const auto last = static_cast<char32_t>(*runs[i][1].AsInt());
    const GeneralCategory expected = CategoryNamed(*runs[i][2].AsString());
    for (char32_t cp = first; cp <= last; ++cp, ++checked) {
      if (CategoryOf(cp) != expected && ++mismatches < 20) {
        ADD_FAILURE() << "U+" << std::hex << static_cast<uint32_t>(cp) << ": got "
                      << static_cast<int>(CategoryOf(cp)) << ", expected "
                      << static_cast<int>(expected);
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_GT(checked, 280000u);
}

TEST(UnicodeTest, NormalizationMatchesPython) {
  const absl::StatusOr<Json> fixture = LoadFixture();
  ASSERT_TRUE(fixture.ok()) << fixture.status();
  const Json cases = *fixture->Get("normalization");
  ASSERT_GT(cases.size(), 40u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = *cases[i].Get("text")->AsString();
    EXPECT_EQ(Normalize(text, NormalizationForm::kNfc), *cases[i].Get("nfc")->AsString()) << text;
    EXPECT_EQ(Normalize(text, NormalizationForm::kNfd), *cases[i].Get("nfd")->AsString()) << text;
    EXPECT_EQ(Normalize(text, NormalizationForm::kNfkc), *cases[i].Get("nfkc")->AsString())
        << text;
    EXPECT_EQ(Normalize(text, NormalizationForm::kNfkd), *cases[i].Get("nfkd")->AsString())
        << text;
  }
}

TEST(UnicodeTest, LowercaseMatchesPython) {
  const absl::StatusOr<Json> fixture = LoadFixture();
  ASSERT_TRUE(fixture.ok()) << fixture.status();
  const Json cases = *fixture->Get("lowercase");
  ASSERT_GT(cases.size(), 40u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = *cases[i].Get("text")->AsString();
    EXPECT_EQ(ToLowerCase(text), *cases[i].Get("lower")->AsString()) << text;
  }
}

}  // namespace
}  // namespace loom::text
