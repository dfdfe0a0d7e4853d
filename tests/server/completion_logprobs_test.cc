#include "server/api/completion_logprobs.h"

#include <cmath>
#include <limits>
#include <vector>

#include "engine/common/json.h"
#include "gtest/gtest.h"

namespace loom::api {
namespace {

Json Write(const std::vector<CompletionTokenLogprob>& tokens, size_t first_offset) {
  JsonWriter w;
  WriteCompletionLogprobs(w, tokens, first_offset);
  absl::StatusOr<Json> parsed = Json::Parse(w.str());
  EXPECT_TRUE(parsed.ok()) << parsed.status() << " in " << w.str();
  return parsed.ok() ? *parsed : *Json::Parse("{}");
}

std::vector<int64_t> Offsets(const Json& logprobs) {
  std::vector<int64_t> out;
  absl::StatusOr<Json> offsets = logprobs.Get("text_offset");
  EXPECT_TRUE(offsets.ok());
  for (size_t i = 0; offsets.ok() && i < offsets->size(); ++i) {
    out.push_back(*(*offsets)[i].AsInt());
  }
  return out;
}

// An echoed prompt starts with a token nothing scores: its logprob and its top entry are null,
// while every other position carries its score and its top tokens.
TEST(CompletionLogprobsTest, TheFirstPromptTokenHasNullLogprobAndNullTop) {
  const std::vector<CompletionTokenLogprob> tokens = {
      {"<s>", std::nullopt, {}},
      {"Hello", -1.5f, {{"Hello", -1.5f}, {"Hi", -2.25f}}},
      {" world", -0.5f, {{" world", -0.5f}}},
  };
  const Json lp = Write(tokens, 0);
  const Json texts = *lp.Get("tokens");
  ASSERT_EQ(texts.size(), 3u);
  EXPECT_EQ(*texts[0].AsString(), "<s>");
  EXPECT_EQ(*texts[2].AsString(), " world");
  const Json scores = *lp.Get("token_logprobs");
  ASSERT_EQ(scores.size(), 3u);
  EXPECT_TRUE(scores[0].IsNull());
  EXPECT_DOUBLE_EQ(*scores[1].AsDouble(), -1.5);
  EXPECT_DOUBLE_EQ(*scores[2].AsDouble(), -0.5);
  const Json top = *lp.Get("top_logprobs");
  ASSERT_EQ(top.size(), 3u);
  EXPECT_TRUE(top[0].IsNull());
  ASSERT_TRUE(top[1].IsObject());
  EXPECT_DOUBLE_EQ(*top[1].GetDouble("Hi"), -2.25);
  EXPECT_DOUBLE_EQ(*top[2].GetDouble(" world"), -0.5);
  EXPECT_EQ(Offsets(lp), (std::vector<int64_t>{0, 3, 8}));
}

// Offsets count code points, not bytes: "é" is 2 bytes, "日本" 6, an emoji 4 and an ill-formed
// fragment (which the JSON shows as one U+FFFD) 2, each one character per code point.
TEST(CompletionLogprobsTest, TextOffsetCountsCodePointsFromTheGivenStart) {
  const std::vector<CompletionTokenLogprob> tokens = {
      {"\xC3\xA9", -1.0f, {}},        // é
      {"\xE6\x97\xA5\xE6\x9C\xAC", -1.0f, {}},  // 日本
      {"x", -1.0f, {}},
      {"\xF0\x9F\x98\x80", -1.0f, {}},  // 😀
      {"\xE6\x97", -1.0f, {}},          // the first two bytes of 日
      {"z", -1.0f, {}},
  };
  EXPECT_EQ(Offsets(Write(tokens, 5)), (std::vector<int64_t>{5, 6, 8, 9, 10, 11}));
  EXPECT_EQ(EndOffset(tokens, 5), 12u);
  EXPECT_EQ(CountCodePoints("\xC3\xA9t\xC3\xA9"), 3u);
  EXPECT_EQ(CountCodePoints(""), 0u);
}

// A stream writes a choice in pieces, each starting where the previous ended: the offsets are
// those of the whole choice written at once.
TEST(CompletionLogprobsTest, PiecesContinueTheOffsetsOfTheWhole) {
  const std::vector<CompletionTokenLogprob> whole = {
      {"<s>", std::nullopt, {}}, {"\xC3\xA9t\xC3\xA9", -2.0f, {}}, {" ok", -0.25f, {}},
      {"\xE2\x82\xAC", -3.0f, {}}};
  const std::vector<CompletionTokenLogprob> first(whole.begin(), whole.begin() + 2);
  const std::vector<CompletionTokenLogprob> second(whole.begin() + 2, whole.end());
  std::vector<int64_t> pieces = Offsets(Write(first, 0));
  const std::vector<int64_t> rest = Offsets(Write(second, EndOffset(first, 0)));
  pieces.insert(pieces.end(), rest.begin(), rest.end());
  EXPECT_EQ(pieces, Offsets(Write(whole, 0)));
  EXPECT_EQ(pieces, (std::vector<int64_t>{0, 3, 6, 9}));
}

// -inf (a token the model cannot produce) has no JSON form: it is written as -9999.0.
TEST(CompletionLogprobsTest, NonFiniteScoresAreWrittenAsMinus9999) {
  const float inf = std::numeric_limits<float>::infinity();
  const Json lp = Write({{"a", -inf, {{"b", -0.1f}, {"a", -inf}}}}, 0);
  EXPECT_DOUBLE_EQ(*(*lp.Get("token_logprobs"))[0].AsDouble(), -9999.0);
  EXPECT_DOUBLE_EQ(*(*lp.Get("top_logprobs"))[0].GetDouble("a"), -9999.0);
}

}  // namespace
}  // namespace loom::api
