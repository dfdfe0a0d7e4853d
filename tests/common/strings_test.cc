// loom::StrCat (engine/common/strings.h): every kind of argument it documents, including the
// edge values of each integer type, floating-point formatting and strong ids.
#include "engine/common/strings.h"

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "engine/api/ids.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(StrCatTest, Nothing) { EXPECT_EQ(StrCat(), ""); }

TEST(StrCatTest, Strings) {
  const std::string s = "std";
  const std::string_view v = "view";
  const absl::string_view a = "absl";
  const char* c = "c";
  const char* null = nullptr;
  EXPECT_EQ(StrCat(s, "-", v, "-", a, "-", c), "std-view-absl-c");
  EXPECT_EQ(StrCat(null), "(null)");
  EXPECT_EQ(StrCat(std::string_view("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_EQ(StrCat(std::string(), std::string_view()), "");
}

TEST(StrCatTest, CharactersAndBooleansAreNotNumbers) {
  EXPECT_EQ(StrCat('x', 'y'), "xy");
  EXPECT_EQ(StrCat(true, "/", false), "true/false");
}

TEST(StrCatTest, IntegersOfEveryWidth) {
  EXPECT_EQ(StrCat(int8_t{-128}), "-128");
  EXPECT_EQ(StrCat(uint8_t{255}), "255");
  EXPECT_EQ(StrCat(int16_t{-32768}), "-32768");
  EXPECT_EQ(StrCat(uint16_t{65535}), "65535");
  EXPECT_EQ(StrCat(std::numeric_limits<int32_t>::min()), "-2147483648");
  EXPECT_EQ(StrCat(std::numeric_limits<uint32_t>::max()), "4294967295");
  EXPECT_EQ(StrCat(std::numeric_limits<int64_t>::min()), "-9223372036854775808");
  EXPECT_EQ(StrCat(std::numeric_limits<uint64_t>::max()), "18446744073709551615");
  EXPECT_EQ(StrCat(size_t{0}), "0");
}

TEST(StrCatTest, FloatingPointUsesSixSignificantDigits) {
  EXPECT_EQ(StrCat(0.5), "0.5");
  EXPECT_EQ(StrCat(0.1f), "0.1");  // the float's binary value does not leak into messages
  EXPECT_EQ(StrCat(1e-6), "1e-06");
  EXPECT_EQ(StrCat(10000.0), "10000");
  EXPECT_EQ(StrCat(500000.0), "500000");
  EXPECT_EQ(StrCat(3.14159265358979), "3.14159");
  EXPECT_EQ(StrCat(1e20), "1e+20");
  EXPECT_EQ(StrCat(-2.0f), "-2");
  EXPECT_EQ(StrCat(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(StrCat(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(StrCat(std::numeric_limits<double>::quiet_NaN()), "nan");
}

TEST(StrCatTest, StrongIdsPrintTheirValue) {
  EXPECT_EQ(StrCat("seq ", SequenceId(18446744073709551615u), " block ", BlockId(-1), " token ",
                   TokenId(42)),
            "seq 18446744073709551615 block -1 token 42");
}

TEST(StrCatTest, MixedArgumentsInOrder) {
  EXPECT_EQ(StrCat("a", 1, 'b', 2.5, std::string("c"), true), "a1b2.5ctrue");
}

}  // namespace
}  // namespace loom
