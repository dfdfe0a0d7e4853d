#include "engine/common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace loom {
namespace {

std::u32string DecodeAll(std::string_view s) {
  std::u32string out;
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 0;
    out.push_back(DecodeUtf8(s, pos, &len));
    EXPECT_GE(len, 1u);
    pos += len == 0 ? 1 : len;
  }
  return out;
}

TEST(Utf8Test, DecodesEveryLength) {
  EXPECT_EQ(DecodeAll("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"), U"a\u00E9\u20AC\U0001F600");
}

// Expected values are what Python's bytes.decode("utf-8", "replace") gives.
TEST(Utf8Test, EachMaximalIllFormedSubpartIsOneReplacement) {
  EXPECT_EQ(DecodeAll("\xE2\x82"), U"\uFFFD");                 // truncated 3-byte sequence
  EXPECT_EQ(DecodeAll("\xF0\x80\x80"), U"\uFFFD\uFFFD\uFFFD");  // overlong 4-byte lead
  EXPECT_EQ(DecodeAll("\xED\xA0\x80"), U"\uFFFD\uFFFD\uFFFD");  // surrogate
  EXPECT_EQ(DecodeAll("\xC0\xAF"), U"\uFFFD\uFFFD");            // overlong 2-byte
  EXPECT_EQ(DecodeAll("\xF4\x90\x80\x80"), U"\uFFFD\uFFFD\uFFFD\uFFFD");  // past U+10FFFF
  EXPECT_EQ(DecodeAll("\xE2\x82x"), U"\uFFFDx");
  EXPECT_EQ(DecodeAll("\xFF"), U"\uFFFD");
}

TEST(Utf8Test, SanitizeAndValidity) {
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo"));
  EXPECT_FALSE(IsValidUtf8("h\xC3llo"));
  EXPECT_EQ(SanitizeUtf8("h\xC3llo"), "h\xEF\xBF\xBDllo");
  EXPECT_EQ(SanitizeUtf8("ok"), "ok");
}

TEST(Utf8Test, AppendRoundTripsAndRefusesSurrogates) {
  std::string s;
  for (char32_t cp : {U'a', U'\u00E9', U'\u20AC', U'\U0001F600'}) AppendUtf8(cp, &s);
  EXPECT_EQ(DecodeAll(s), U"a\u00E9\u20AC\U0001F600");
  std::string bad;
  AppendUtf8(0xD800, &bad);
  AppendUtf8(0x110000, &bad);
  EXPECT_EQ(bad, "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Utf8Test, CompletePrefixStopsBeforeAnUnfinishedCharacter) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xF0\x9F\x98"), 2u);    // emoji missing its last byte
  EXPECT_EQ(CompleteUtf8Prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xFF"), 3u);           // ill-formed: will never complete
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2x"), 4u);
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
}

}  // namespace
}  // namespace loom
