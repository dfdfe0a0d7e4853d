// Json (engine/common/json.h): parse errors with their byte offset, type errors naming the path,
// the Get<Type> fallbacks and null handling, integral floats and out-of-range numbers, and input
// shapes that must give an error rather than a crash (deep nesting, out-of-range indices).
#include "engine/common/json.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

std::string Message(const absl::Status& status) { return std::string(status.message()); }

Json MustParse(std::string_view text) {
  absl::StatusOr<Json> json = Json::Parse(text);
  EXPECT_TRUE(json.ok()) << json.status() << "\n" << text;
  return json.ok() ? *json : *Json::Parse("null");
}

TEST(JsonTest, ParsesEveryKind) {
  const Json j = MustParse(
      R"({"i": -3, "u": 18446744073709551615, "f": 2.5, "s": "x\u00e9", "b": true, "n": null,)"
      R"( "a": [1, "two", [3]], "o": {"k": 1}})");
  EXPECT_TRUE(j.IsObject());
  EXPECT_TRUE(j.Find("i")->IsInteger());
  EXPECT_TRUE(j.Find("f")->IsNumber());
  EXPECT_FALSE(j.Find("f")->IsInteger());
  EXPECT_TRUE(j.Find("s")->IsString());
  EXPECT_EQ(*j.GetString("s"), "x\xc3\xa9");
  EXPECT_TRUE(j.Find("b")->IsBool());
  EXPECT_TRUE(j.Find("n")->IsNull());
  EXPECT_TRUE(j.Find("a")->IsArray());
  EXPECT_EQ(j.Find("a")->size(), 3u);
  EXPECT_EQ(*(*j.Find("a"))[1].AsString(), "two");
  EXPECT_EQ(*(*j.Find("a"))[2][0].AsInt(), 3);
  EXPECT_EQ(*j.GetInt("i"), -3);
  EXPECT_EQ(j.Find("o")->Items().size(), 1u);
  EXPECT_EQ(j.size(), 0u);  // an object has no array elements
  EXPECT_EQ(j.Find("o")->Dump(), R"({"k":1})");
}

TEST(JsonTest, ItemsAreInKeyOrderWithPaths) {
  const Json j = MustParse(R"({"b": 1, "a": {"c": [10, 20]}})");
  const auto items = j.Items();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].first, "a");
  EXPECT_EQ(items[0].second.path(), "a");
  const Json c = *items[0].second.Get("c");
  EXPECT_EQ(c.path(), "a.c");
  EXPECT_EQ(c[1].path(), "a.c[1]");
  EXPECT_EQ(*c[1].AsInt(), 20);
  EXPECT_TRUE(MustParse("[1]").Items().empty());
}

TEST(JsonTest, SyntaxErrorsNameTheSourceAndTheByteOffset) {
  struct Case {
    std::string text;
    int offset;  // 0-based offset of the byte the parser stopped at
  };
  const Case cases[] = {
      {"", 0},              // nothing at all: the end of input
      {"{", 1},             // end of input where a key should be
      {R"({"a": 1,})", 8},  // the '}' after a trailing comma
      {R"({"a" 1})", 5},    // the number where ':' should be
      {"[1] x", 4},         // trailing garbage
      {"[1, 2", 5},         // unterminated array: the end of input
      {"{\"a\": tru}", 9},  // a bad literal, reported after its last letter
  };
  for (const Case& c : cases) {
    absl::StatusOr<Json> json = Json::Parse(c.text, "cfg/config.json");
    ASSERT_FALSE(json.ok()) << c.text;
    EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message = Message(json.status());
    LOOM_EXPECT_CONTAINS(
        message, "cfg/config.json: invalid JSON at byte offset " + std::to_string(c.offset) + ":");
  }
}

TEST(JsonTest, RejectsInvalidUtf8AndControlCharacters) {
  EXPECT_FALSE(Json::Parse("\"\xff\"").ok());
  EXPECT_FALSE(Json::Parse("\"a\x01b\"").ok());
  EXPECT_FALSE(Json::Parse("\"\\ud800\"").ok());  // lone surrogate
  EXPECT_FALSE(Json::Parse(std::string("[1,\0 2]", 7)).ok());
}

TEST(JsonTest, TypeErrorsNameThePath) {
  const Json j =
      MustParse(R"({"rope_scaling": {"factor": "8", "list": [1, "x"]}, "vocab_size": "32000"})");
  const Json scaling = *j.Get("rope_scaling");
  absl::StatusOr<double> factor = scaling.GetDouble("factor");
  ASSERT_FALSE(factor.ok());
  EXPECT_EQ(factor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(factor.status()), "rope_scaling.factor is a string, expected a number");

  absl::StatusOr<int64_t> vocab =
      j.GetInt("vocab_size", 5);  // a fallback does not hide a type error
  ASSERT_FALSE(vocab.ok());
  EXPECT_EQ(Message(vocab.status()), "vocab_size is a string, expected an integer");

  absl::StatusOr<int64_t> element = (*scaling.Get("list"))[1].AsInt();
  ASSERT_FALSE(element.ok());
  EXPECT_EQ(Message(element.status()), "rope_scaling.list[1] is a string, expected an integer");

  EXPECT_EQ(Message(scaling.GetBool("list").status()),
            "rope_scaling.list is an array, expected a boolean");
  EXPECT_EQ(Message(scaling.GetString("list").status()),
            "rope_scaling.list is an array, expected a string");
  EXPECT_EQ(Message(j.AsInt().status()), "<root> is an object, expected an integer");
}

TEST(JsonTest, GetOnANonObjectSaysWhatItIs) {
  const Json j = MustParse(R"({"a": [1, 2]})");
  absl::StatusOr<Json> inner = j.Find("a")->Get("b");
  ASSERT_FALSE(inner.ok());
  EXPECT_EQ(inner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(inner.status()), "a is an array, expected an object");
  EXPECT_FALSE(j.Find("a")->Has("b"));
  EXPECT_FALSE(j.Find("a")->Find("b").has_value());
}

TEST(JsonTest, MissingKeysAreNotFoundWithTheirPath) {
  const Json j = MustParse(R"({"rope_scaling": {}})");
  const Json scaling = *j.Get("rope_scaling");
  absl::StatusOr<double> factor = scaling.GetDouble("factor");
  ASSERT_FALSE(factor.ok());
  EXPECT_EQ(factor.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Message(factor.status()), "missing key 'rope_scaling.factor'");
  EXPECT_EQ(Message(j.Get("x").status()), "missing key 'x'");
}

TEST(JsonTest, FallbacksApplyToMissingAndNullOnly) {
  const Json j = MustParse(R"({"n": null, "i": 7, "d": 0.5, "s": "v", "b": false})");
  EXPECT_EQ(*j.GetInt("missing", 3), 3);
  EXPECT_EQ(*j.GetInt("n", 3), 3);
  EXPECT_EQ(*j.GetInt("i", 3), 7);
  EXPECT_EQ(*j.GetDouble("missing", 1.5), 1.5);
  EXPECT_EQ(*j.GetDouble("n", 1.5), 1.5);
  EXPECT_EQ(*j.GetDouble("i", 1.5), 7.0);  // an integer is a number
  EXPECT_EQ(*j.GetDouble("d", 1.5), 0.5);
  EXPECT_EQ(*j.GetString("missing", "def"), "def");
  EXPECT_EQ(*j.GetString("n", "def"), "def");
  EXPECT_EQ(*j.GetString("s", "def"), "v");
  EXPECT_EQ(*j.GetBool("missing", true), true);
  EXPECT_EQ(*j.GetBool("n", true), true);
  EXPECT_EQ(*j.GetBool("b", true), false);
  // A boolean is not a number and a number is not a boolean.
  EXPECT_FALSE(j.GetInt("b", 1).ok());
  EXPECT_FALSE(j.GetBool("i", true).ok());
}

TEST(JsonTest, NullWithoutFallbackNamesThePathAndTheExpectedType) {
  const Json j = MustParse(R"({"rope_scaling": {"factor": null}})");
  const Json scaling = *j.Get("rope_scaling");
  absl::StatusOr<double> factor = scaling.GetDouble("factor");
  ASSERT_FALSE(factor.ok());
  EXPECT_EQ(factor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(factor.status()), "rope_scaling.factor is null, expected a number");
  EXPECT_EQ(Message(scaling.GetInt("factor").status()),
            "rope_scaling.factor is null, expected an integer");
  EXPECT_EQ(Message(scaling.GetString("factor").status()),
            "rope_scaling.factor is null, expected a string");
  EXPECT_EQ(Message(scaling.GetBool("factor").status()),
            "rope_scaling.factor is null, expected a boolean");
}

TEST(JsonTest, IntegralFloatsAreIntegers) {
  const Json j = MustParse(R"([32000.0, 1e3, -0.0, -7.0, 2.5, 1e-300, 9.1e18, 1e19, -1e19])");
  EXPECT_EQ(*j[0].AsInt(), 32000);
  EXPECT_TRUE(j[0].IsInteger());
  EXPECT_EQ(*j[1].AsInt(), 1000);
  EXPECT_EQ(*j[2].AsInt(), 0);
  EXPECT_EQ(*j[3].AsInt(), -7);
  EXPECT_FALSE(j[4].IsInteger());
  EXPECT_EQ(Message(j[4].AsInt().status()), "[4] is a number, expected an integer");
  EXPECT_FALSE(j[5].AsInt().ok());
  EXPECT_EQ(*j[6].AsInt(), int64_t{9100000000000000000});
  // Integral, but outside int64: never converted (that would be undefined behaviour).
  EXPECT_FALSE(j[7].AsInt().ok());
  EXPECT_FALSE(j[8].AsInt().ok());
  EXPECT_DOUBLE_EQ(*j[7].AsDouble(), 1e19);
}

TEST(JsonTest, HugeNumbers) {
  const Json j = MustParse(
      "[9223372036854775807, -9223372036854775808, 9223372036854775808,"
      " 18446744073709551615, 18446744073709551616, -9223372036854775809,"
      " 1e308, 0, 99999999999999999999999999999]");
  EXPECT_EQ(*j[0].AsInt(), INT64_MAX);
  EXPECT_EQ(*j[1].AsInt(), INT64_MIN);
  absl::StatusOr<int64_t> above = j[2].AsInt();
  ASSERT_FALSE(above.ok());
  EXPECT_EQ(above.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Message(above.status()), "[2] is too large");
  EXPECT_EQ(j[3].AsInt().status().code(), absl::StatusCode::kOutOfRange);
  // Past uint64 the parser keeps a double: not an integer we can represent.
  EXPECT_FALSE(j[4].AsInt().ok());
  EXPECT_FALSE(j[5].AsInt().ok());
  EXPECT_DOUBLE_EQ(*j[6].AsDouble(), 1e308);
  EXPECT_FALSE(j[8].AsInt().ok());
  EXPECT_TRUE(j[8].AsDouble().ok());
  // A number past the double range is refused by the parser.
  absl::StatusOr<Json> overflow = Json::Parse("{\"theta\": 1e400}", "config.json");
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(Message(overflow.status()), "config.json: invalid JSON");
  LOOM_EXPECT_CONTAINS(Message(overflow.status()), "1e400");
}

TEST(JsonTest, OutOfRangeIndexIsNullNotACrash) {
  const Json j = MustParse(R"({"a": [1], "o": {"k": 2}, "s": "x"})");
  const Json a = *j.Get("a");
  const Json past = a[5];
  EXPECT_TRUE(past.IsNull());
  EXPECT_EQ(past.path(), "a[5]");
  EXPECT_EQ(Message(past.AsInt().status()), "a[5] is null, expected an integer");
  // Indexing something that is not an array is the same.
  EXPECT_TRUE((*j.Get("o"))[0].IsNull());
  EXPECT_TRUE((*j.Get("s"))[0].IsNull());
  EXPECT_TRUE(past[3].IsNull());
  EXPECT_EQ(past[3].path(), "a[5][3]");
}

TEST(JsonTest, HandlesOutliveTheirParent) {
  Json inner = MustParse("null");
  {
    const Json j = MustParse(R"({"a": {"b": [4, 5]}})");
    inner = (*(*j.Get("a")).Get("b"))[1];
  }
  EXPECT_EQ(*inner.AsInt(), 5);
  EXPECT_EQ(inner.path(), "a.b[1]");
}

TEST(JsonTest, ModerateNestingParses) {
  const int depth = 200;
  const std::string text = std::string(depth, '[') + "7" + std::string(depth, ']');
  Json j = MustParse(text);
  for (int i = 0; i < depth; ++i) j = j[0];
  EXPECT_EQ(*j.AsInt(), 7);
  EXPECT_FALSE(MustParse(text).Dump().empty());
}

// Deeply nested input (a hostile safetensors header or config) is refused at parse time with
// its offset, so nothing later (Dump in an error message, destruction) recurses that deep.
TEST(JsonTest, DeepNestingIsAnErrorNotACrash) {
  for (const char open : {'[', '{'}) {
    std::string text;
    const int depth = 1'000'000;
    for (int i = 0; i < depth; ++i) text += open == '[' ? "[" : "{\"k\":";
    text += "1";
    for (int i = 0; i < depth; ++i) text += open == '[' ? ']' : '}';
    absl::StatusOr<Json> json = Json::Parse(text, "header");
    ASSERT_FALSE(json.ok());
    EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
    LOOM_EXPECT_CONTAINS(Message(json.status()), "header: invalid JSON at byte offset ");
    LOOM_EXPECT_CONTAINS(Message(json.status()), "nested deeper than");
  }
  // Brackets inside strings do not count.
  const std::string in_string = "[\"" + std::string(100'000, '[') + "\\\"[\"]";
  absl::StatusOr<Json> json = Json::Parse(in_string);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)[0].AsString()->size(), 100'000u + 2u);
}

TEST(JsonTest, NestingLimitIsExact) {
  const std::string at = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(Json::Parse(at).ok());
  const std::string over = "[" + at + "]";
  absl::StatusOr<Json> json = Json::Parse(over);
  ASSERT_FALSE(json.ok());
  // The offending bracket is the last '[' of the run.
  LOOM_EXPECT_CONTAINS(Message(json.status()),
                       "at byte offset " + std::to_string(kMaxJsonDepth) + ":");
}

}  // namespace
}  // namespace loom
