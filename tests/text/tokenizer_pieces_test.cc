// Building blocks of the tokenizer pipeline checked against the behaviour HF documents: split
// behaviours, the GPT-2 byte table, decoders on token lists, and BPE merge order.
#include <string>
#include <vector>

#include "engine/common/json.h"
#include "gtest/gtest.h"
#include "server/text/tokenizer/byte_level.h"
#include "server/text/tokenizer/decoder.h"
#include "server/text/tokenizer/pattern.h"
#include "server/text/tokenizer/pre_tokenizer.h"

namespace loom::text {
namespace {

std::vector<std::string> Split(const std::string& text, SplitBehavior behavior, bool invert) {
  std::vector<std::pair<size_t, size_t>> matches;
  Pattern::Literal("-").FindAll(text, &matches);
  std::vector<Piece> out;
  SplitPiece(Piece{text, true}, matches, behavior, invert, &out);
  std::vector<std::string> texts;
  for (const Piece& p : out) texts.push_back(p.text);
  return texts;
}

using Strings = std::vector<std::string>;

TEST(SplitPieceTest, BehavioursAsDocumented) {
  // The example of the HF SplitDelimiterBehavior documentation.
  const std::string text = "the-final--countdown";
  EXPECT_EQ(Split(text, SplitBehavior::kRemoved, false), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(Split(text, SplitBehavior::kIsolated, false),
            (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(Split(text, SplitBehavior::kMergedWithPrevious, false),
            (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(Split(text, SplitBehavior::kMergedWithNext, false),
            (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(Split(text, SplitBehavior::kContiguous, false),
            (Strings{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(Split(text, SplitBehavior::kRemoved, true), (Strings{"-", "-", "-"}));
  EXPECT_EQ(Split("", SplitBehavior::kIsolated, false), Strings{});
}

TEST(SplitPieceTest, OnlyTheFirstPieceStaysAtStart) {
  std::vector<std::pair<size_t, size_t>> matches = {{1, 2}};
  std::vector<Piece> out;
  SplitPiece(Piece{"a-b", true}, matches, SplitBehavior::kIsolated, false, &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].at_start);
  EXPECT_FALSE(out[1].at_start);
  EXPECT_FALSE(out[2].at_start);
}

TEST(ByteLevelTest, Gpt2Table) {
  std::string out;
  AppendByteLevel(std::string_view(" \n\x00!\xFF\xAD", 6), &out);
  EXPECT_EQ(out, "\xC4\xA0\xC4\x8A\xC4\x80!\xC3\xBF\xC5\x83");  // Ġ Ċ Ā ! ÿ Ń
  for (int b = 0; b < 256; ++b) {
    std::string one;
    AppendByteLevel(std::string(1, static_cast<char>(b)), &one);
    size_t len = 0;
    char32_t cp = 0;
    // Decode the one code point by hand (1 or 2 bytes).
    if (static_cast<unsigned char>(one[0]) < 0x80) {
      cp = static_cast<unsigned char>(one[0]);
      len = 1;
    } else {
      cp = ((one[0] & 0x1F) << 6) | (one[1] & 0x3F);
      len = 2;
    }
    EXPECT_EQ(one.size(), len);
    EXPECT_EQ(ByteLevelByte(cp), b);
  }
  EXPECT_EQ(ByteLevelByte(' '), -1);
  EXPECT_EQ(ByteLevelByte(0x4E00), -1);
}

std::vector<std::string> RunDecoder(const std::string& json, std::vector<std::string> tokens) {
  auto parsed = Json::Parse(json);
  EXPECT_TRUE(parsed.ok());
  auto decoder = ParseDecoder(*parsed);
  EXPECT_TRUE(decoder.ok()) << decoder.status();
  (*decoder)->DecodeChain(&tokens);
  return tokens;
}

TEST(DecoderTest, MatchesReferenceBehaviour) {
  // Results recorded from HF tokenizers 0.23 decoders on the same token lists.
  EXPECT_EQ(RunDecoder(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always"})",
                       {"▁▁a", "▁b▁"}),
            (Strings{"a", " b "}));
  EXPECT_EQ(RunDecoder(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"never"})",
                       {"▁▁a", "▁b▁"}),
            (Strings{"  a", " b "}));
  EXPECT_EQ(RunDecoder(R"({"type":"ByteLevel"})", {"\xC4\xA0"
                                                   "a",
                                                   "<｜x｜>",
                                                   "\xC4\xA0"
                                                   "b"}),
            (Strings{" a<｜x｜> b"}));
  EXPECT_EQ(RunDecoder(R"({"type":"ByteFallback"})",
                       {"<0xE2>", "<0x41>", "a", "<0xE2>", "<0x82>", "<0xAC>"}),
            (Strings{"\xEF\xBF\xBD", "\xEF\xBF\xBD", "a", "\xE2\x82\xAC"}));
  EXPECT_EQ(RunDecoder(R"({"type":"Strip","content":" ","start":1,"stop":0})", {" a", "  b", ""}),
            (Strings{"a", " b", ""}));
  EXPECT_EQ(RunDecoder(R"({"type":"Sequence","decoders":[{"type":"Fuse"},)"
                       R"({"type":"Replace","pattern":{"String":"_"},"content":" "}]})",
                       {"a_", "b"}),
            (Strings{"a b"}));
}

TEST(DecoderTest, RefusesUnknownTypes) {
  auto parsed = Json::Parse(R"({"type":"WordPiece","prefix":"##"})");
  ASSERT_TRUE(parsed.ok());
  auto decoder = ParseDecoder(*parsed);
  ASSERT_FALSE(decoder.ok());
  EXPECT_NE(std::string(decoder.status().message()).find("WordPiece"), std::string::npos);
}

}  // namespace
}  // namespace loom::text
