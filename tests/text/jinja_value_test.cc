#include "server/text/jinja/value.h"

#include <string>

#include "gtest/gtest.h"

namespace loom::text::jinja {
namespace {

TEST(JinjaValueTest, FloatsPrintLikePythonRepr) {
  EXPECT_EQ(FormatPythonFloat(1.0), "1.0");
  EXPECT_EQ(FormatPythonFloat(0.1), "0.1");
  EXPECT_EQ(FormatPythonFloat(-2.5), "-2.5");
  EXPECT_EQ(FormatPythonFloat(1e16), "1e+16");
  EXPECT_EQ(FormatPythonFloat(1e15), "1000000000000000.0");
  EXPECT_EQ(FormatPythonFloat(1.5e-7), "1.5e-07");
  EXPECT_EQ(FormatPythonFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatPythonFloat(0.00001), "1e-05");
  EXPECT_EQ(FormatPythonFloat(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatPythonFloat(-0.0), "-0.0");
  EXPECT_EQ(FormatPythonFloat(1.0 / 0.0), "inf");
}

TEST(JinjaValueTest, StringsReprLikePython) {
  EXPECT_EQ(PythonStringRepr("abc"), "'abc'");
  EXPECT_EQ(PythonStringRepr("it's"), "\"it's\"");
  EXPECT_EQ(PythonStringRepr("a'b\"c"), "'a\\'b\"c'");
  EXPECT_EQ(PythonStringRepr("new\nline\t\\"), "'new\\nline\\t\\\\'");
  EXPECT_EQ(PythonStringRepr("\x01\xC3\xA9"), "'\\x01\xC3\xA9'");
}

TEST(JinjaValueTest, ContainersPrintLikePython) {
  auto dict = std::make_shared<Dict>();
  dict->Set(Value::String("b"), Value::Int(1));
  dict->Set(Value::String("a"), Value::List({Value::None(), Value::Bool(true), Value::Float(2)}));
  EXPECT_EQ(Value::FromDict(dict).Str(), "{'b': 1, 'a': [None, True, 2.0]}");
  EXPECT_EQ(Value::Tuple({Value::Int(1)}).Str(), "(1,)");
  EXPECT_EQ(Value::Tuple({}).Str(), "()");
  EXPECT_EQ(Value::Undefined().Str(), "");
}

TEST(JinjaValueTest, EqualityFollowsPython) {
  EXPECT_TRUE(Value::Int(1).Equals(Value::Float(1.0)));
  EXPECT_TRUE(Value::Int(1).Equals(Value::Bool(true)));
  EXPECT_FALSE(Value::String("1").Equals(Value::Int(1)));
  EXPECT_TRUE(Value::List({Value::Int(1)}).Equals(Value::List({Value::Float(1)})));
  EXPECT_FALSE(Value::List({Value::Int(1)}).Equals(Value::Tuple({Value::Int(1)})));
  EXPECT_TRUE(Value::None().Equals(Value::None()));
  EXPECT_FALSE(Value::None().Equals(Value::Undefined()));
}

TEST(JinjaValueTest, ParseJsonKeepsKeyOrderAndNumberKinds) {
  absl::StatusOr<Value> v = ParseJson(R"({"z": 1, "a": 1.0, "m": [true, null, "x"], "big": 1e3})");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->IsDict());
  const auto& items = v->AsDict().items;
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0].first.AsString(), "z");
  EXPECT_EQ(items[1].first.AsString(), "a");
  EXPECT_TRUE(items[0].second.IsInt());
  EXPECT_TRUE(items[1].second.IsFloat());
  EXPECT_TRUE(items[3].second.IsFloat());
  EXPECT_EQ(v->Str(), "{'z': 1, 'a': 1.0, 'm': [True, None, 'x'], 'big': 1000.0}");
}

TEST(JinjaValueTest, ParseJsonRejectsBadInput) {
  EXPECT_FALSE(ParseJson("{\"a\": }").ok());
  EXPECT_FALSE(ParseJson("[1, 2").ok());
  EXPECT_FALSE(ParseJson("").ok());
  EXPECT_FALSE(ParseJson(std::string(kMaxValueDepth + 10, '[') + std::string(kMaxValueDepth + 10, ']')).ok());
  EXPECT_TRUE(ParseJson(std::string(100, '[') + std::string(100, ']')).ok());
}

TEST(JinjaValueTest, DumpJsonMatchesPythonJsonDumps) {
  absl::StatusOr<Value> v = ParseJson(R"({"b": [1, 2.5, {}], "a": "é\n\"", "c": []})");
  ASSERT_TRUE(v.ok());
  JsonDumpOptions compact;
  EXPECT_EQ(*DumpJson(*v, compact), "{\"b\": [1, 2.5, {}], \"a\": \"é\\n\\\"\", \"c\": []}");
  JsonDumpOptions pretty;
  pretty.indent = 2;
  EXPECT_EQ(*DumpJson(*v, pretty),
            "{\n  \"b\": [\n    1,\n    2.5,\n    {}\n  ],\n  \"a\": \"é\\n\\\"\",\n  \"c\": []\n}");
  JsonDumpOptions sorted;
  sorted.sort_keys = true;
  sorted.ensure_ascii = true;
  EXPECT_EQ(*DumpJson(*v, sorted), "{\"a\": \"\\u00e9\\n\\\"\", \"b\": [1, 2.5, {}], \"c\": []}");
  EXPECT_FALSE(DumpJson(Value::Undefined(), compact).ok());
}

}  // namespace
}  // namespace loom::text::jinja
