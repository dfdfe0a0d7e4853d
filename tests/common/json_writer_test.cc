#include "engine/common/json_writer.h"

#include "engine/common/json.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(JsonWriterTest, NestedValuesWithCommas) {
  JsonWriter w;
  w.BeginObject();
  w.Key("a");
  w.Int(-3);
  w.Key("b");
  w.BeginArray();
  w.String("x");
  w.Bool(true);
  w.Null();
  w.BeginObject();
  w.EndObject();
  w.EndArray();
  w.Key("c");
  w.Double(0.1);
  w.Key("d");
  w.Uint(18446744073709551615ull);
  w.EndObject();
  EXPECT_EQ(w.str(), R"({"a":-3,"b":["x",true,null,{}],"c":0.1,"d":18446744073709551615})");
}

TEST(JsonWriterTest, EscapesAndRepairsStrings) {
  EXPECT_EQ(JsonQuote("q\"b\\n\n\t\x01"), R"("q\"b\\n\n\t\u0001")");
  EXPECT_EQ(JsonQuote("h\xC3\xA9 \xF0\x9F\x98\x80"), "\"h\xC3\xA9 \xF0\x9F\x98\x80\"");
  EXPECT_EQ(JsonQuote("bad\xC3"), "\"bad\xEF\xBF\xBD\"");
  EXPECT_EQ(JsonQuote("\xED\xA0\x80"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

TEST(JsonWriterTest, DoublesRoundTripAndNonFiniteIsNull) {
  JsonWriter w;
  w.BeginArray();
  w.Double(1.0 / 3.0);
  w.Double(1e300 * 1e10);
  w.Double(-0.5);
  w.EndArray();
  absl::StatusOr<Json> parsed = Json::Parse(w.str());
  ASSERT_TRUE(parsed.ok()) << w.str();
  EXPECT_EQ(*(*parsed)[0].AsDouble(), 1.0 / 3.0);
  EXPECT_TRUE((*parsed)[1].IsNull());
  EXPECT_EQ(*(*parsed)[2].AsDouble(), -0.5);
}

TEST(JsonWriterTest, OutputAlwaysParses) {
  std::string nasty;
  for (int c = 0; c < 256; ++c) nasty.push_back(static_cast<char>(c));
  JsonWriter w;
  w.BeginObject();
  w.Key(nasty);
  w.String(nasty);
  w.EndObject();
  EXPECT_TRUE(Json::Parse(w.str()).ok());
}

}  // namespace
}  // namespace loom
