// kernels/common/dtype.h: the scalar bf16 and f16 conversions against straightforward references,
// exhaustively over every 16-bit pattern, and the f32 -> half rounding against the F16C
// instruction where the CPU has it.
#include "kernels/common/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace loom {
namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// The value of a half, computed from its fields with ldexp (no bit tricks).
double HalfValue(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0x1f) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), -24);
  return sign * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
}

// The value of a bf16, from its fields.
double Bf16Value(uint16_t b) {
  const int sign = (b >> 15) ? -1 : 1;
  const int exponent = (b >> 7) & 0xff;
  const int mantissa = b & 0x7f;
  if (exponent == 0xff) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), -133);
  return sign * std::ldexp(1.0 + mantissa / 128.0, exponent - 127);
}

// Round-to-nearest-even of a finite f32 to bf16, by comparing the distances to the two bf16
// neighbours in double arithmetic.
uint16_t ReferenceF32ToBf16(float value) {
  const uint32_t bits = Bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint16_t below = static_cast<uint16_t>((bits >> 16) & 0x7fffu);  // truncated magnitude
  const uint16_t above = static_cast<uint16_t>(below + 1);               // may be infinity
  const double magnitude = std::fabs(static_cast<double>(value));
  const double low = Bf16Value(below);
  // bf16 has f32's exponent range: the step past the largest finite value is the infinity
  // boundary 2^128, exactly as IEEE rounding treats it.
  const double high = above == 0x7f80u ? std::ldexp(1.0, 128) : Bf16Value(above);
  const double to_low = magnitude - low;
  const double to_high = high - magnitude;
  uint16_t chosen;
  if (to_low < to_high) {
    chosen = below;
  } else if (to_high < to_low) {
    chosen = above;
  } else {
    chosen = (below & 1u) ? above : below;
  }
  return static_cast<uint16_t>(sign | chosen);
}

bool IsBf16NaN(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }
bool IsHalfNaN(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeName(DType::kF16), "f16");
  EXPECT_EQ(DTypeName(DType::kI32), "i32");
  EXPECT_TRUE(IsFloatDType(DType::kF16));
  EXPECT_FALSE(IsFloatDType(DType::kF64));
  EXPECT_FALSE(IsFloatDType(DType::kI8));
}

TEST(DTypeTest, Bf16ToF32IsExactForAllPatterns) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t bf16 = static_cast<uint16_t>(b);
    const float value = Bf16ToF32(bf16);
    if (IsBf16NaN(bf16)) {
      ASSERT_TRUE(std::isnan(value)) << std::hex << b;
      ASSERT_EQ(Bits(value) >> 16, b) << std::hex << b;  // payload and sign kept
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), Bf16Value(bf16)) << std::hex << b;
    ASSERT_EQ(Bits(value), b << 16) << std::hex << b;  // -0 stays -0
  }
}

TEST(DTypeTest, Bf16RoundTripsEveryNonNaNPattern) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t bf16 = static_cast<uint16_t>(b);
    const uint16_t back = F32ToBf16(Bf16ToF32(bf16));
    if (IsBf16NaN(bf16)) {
      ASSERT_TRUE(IsBf16NaN(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000u, bf16 & 0x8000u) << std::hex << b;  // sign kept
      ASSERT_NE(back & 0x40u, 0u) << std::hex << b;                // quiet
    } else {
      ASSERT_EQ(back, bf16) << std::hex << b;
    }
  }
}

// For every bf16 pattern (the high half of an f32) and low halves at and around the rounding
// boundaries, F32ToBf16 agrees with the nearest-even reference.
TEST(DTypeTest, F32ToBf16RoundsToNearestEven) {
  const uint32_t lows[] = {0x0000, 0x0001, 0x3fff, 0x7ffe, 0x7fff, 0x8000,
                           0x8001, 0xbfff, 0xc000, 0xfffe, 0xffff};
  for (uint32_t high = 0; high <= 0xffff; ++high) {
    for (uint32_t low : lows) {
      const uint32_t bits = (high << 16) | low;
      const float value = FromBits(bits);
      const uint16_t got = F32ToBf16(value);
      if (std::isnan(value)) {
        ASSERT_TRUE(IsBf16NaN(got)) << std::hex << bits;
        ASSERT_EQ(got & 0x8000u, (bits >> 16) & 0x8000u) << std::hex << bits;
        continue;
      }
      if (std::isinf(value)) {
        ASSERT_EQ(got, static_cast<uint16_t>(bits >> 16)) << std::hex << bits;
        continue;
      }
      ASSERT_EQ(got, ReferenceF32ToBf16(value)) << std::hex << bits;
    }
  }
  // Hand-checked cases: ties go to the even neighbour, both ways.
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808000u)), 0x3f80u);  // 1 + 2^-8: tie, 0x3f80 is even
  EXPECT_EQ(F32ToBf16(FromBits(0x3f818000u)), 0x3f82u);  // tie, 0x3f81 is odd: up
  EXPECT_EQ(F32ToBf16(FromBits(0x3f808001u)), 0x3f81u);  // just above the tie
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7f80u);  // rounds to infinity
  EXPECT_EQ(F32ToBf16(-std::numeric_limits<float>::max()), 0xff80u);
  EXPECT_EQ(F32ToBf16(FromBits(0x7f7f7fffu)), 0x7f7fu);  // just below: stays finite
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000u);
  EXPECT_EQ(F32ToBf16(FromBits(0x00008000u)), 0x0000u);  // subnormal tie to even (0)
  EXPECT_EQ(F32ToBf16(FromBits(0x00018000u)), 0x0002u);
}

TEST(DTypeTest, F32ToBf16KeepsEveryNaNANaN) {
  // A NaN whose payload lives only in the low half must not become infinity.
  for (uint32_t bits : {0x7f800001u, 0xff800001u, 0x7f80ffffu, 0x7fc00000u, 0x7fffffffu,
                        0xffffffffu, 0x7f810000u}) {
    const uint16_t got = F32ToBf16(FromBits(bits));
    EXPECT_TRUE(IsBf16NaN(got)) << std::hex << bits << " -> " << got;
    EXPECT_EQ(got & 0x8000u, (bits >> 16) & 0x8000u) << std::hex << bits;
  }
}

TEST(DTypeTest, Fp16ToF32IsExactForAllPatterns) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const float value = Fp16ToF32(half);
    if (IsHalfNaN(half)) {
      ASSERT_TRUE(std::isnan(value)) << std::hex << h;
      ASSERT_EQ(Bits(value) >> 31, h >> 15) << std::hex << h;
      ASSERT_EQ((Bits(value) >> 13) & 0x3ffu, h & 0x3ffu) << std::hex << h;  // payload kept
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), HalfValue(half)) << std::hex << h;
    ASSERT_EQ(std::signbit(value), (h >> 15) != 0) << std::hex << h;
  }
}

TEST(DTypeTest, HalfRoundTripsEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const uint16_t back = F32ToFp16(Fp16ToF32(half));
    if (IsHalfNaN(half)) {
      ASSERT_TRUE(IsHalfNaN(back)) << std::hex << h;
      ASSERT_EQ(back & 0x8000u, half & 0x8000u) << std::hex << h;
    } else {
      ASSERT_EQ(back, half) << std::hex << h;
    }
  }
}

// Around every pair of adjacent finite halves: the exact midpoint (a tie), the f32 values just
// below and above it, and the halves themselves. Compared with the rule "nearest, ties to even".
TEST(DTypeTest, F32ToFp16RoundsToNearestEvenAtEveryBoundary) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // positive finite halves; the sign is symmetric
    const double low = HalfValue(static_cast<uint16_t>(h));
    // Past 65504 the next step is the infinity boundary 65536.
    const double high = h + 1 == 0x7c00 ? 65536.0 : HalfValue(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((low + high) / 2);  // exact in f32
    ASSERT_EQ(static_cast<double>(mid), (low + high) / 2);
    const uint16_t even = (h & 1u) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    for (const float sign : {1.0f, -1.0f}) {
      const uint16_t s = sign < 0 ? 0x8000u : 0;
      ASSERT_EQ(F32ToFp16(sign * mid), s | even) << std::hex << h;
      ASSERT_EQ(F32ToFp16(sign * std::nextafter(mid, 0.0f)), s | h) << std::hex << h;
      ASSERT_EQ(F32ToFp16(sign * std::nextafter(mid, 1e30f)), s | (h + 1)) << std::hex << h;
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(F32ToFp16(inf), 0x7c00u);
  EXPECT_EQ(F32ToFp16(-inf), 0xfc00u);
  EXPECT_EQ(F32ToFp16(1e10f), 0x7c00u);
  EXPECT_EQ(F32ToFp16(std::numeric_limits<float>::max()), 0x7c00u);
  EXPECT_EQ(F32ToFp16(1e-10f), 0x0000u);
  EXPECT_EQ(F32ToFp16(-1e-10f), 0x8000u);
  EXPECT_EQ(F32ToFp16(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_TRUE(IsHalfNaN(F32ToFp16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsHalfNaN(F32ToFp16(FromBits(0x7f800001u))));  // payload only in low bits
  EXPECT_EQ(F32ToFp16(FromBits(0xffc00000u)) & 0x8000u, 0x8000u);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t HardwareF32ToFp16(float value) {
  return static_cast<uint16_t>(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("f16c"))) float HardwareFp16ToF32(uint16_t half) { return _cvtsh_ss(half); }

// F16C converts with IEEE round-to-nearest-even: the scalar code must agree with it bit for bit
// (NaNs aside, whose payload the instruction truncates differently) over a dense sample of all
// f32 values plus a random sample.
TEST(DTypeTest, MatchesF16CHardware) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU without F16C";
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float hw = HardwareFp16ToF32(static_cast<uint16_t>(h));
    const float sw = Fp16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(hw)) {
      ASSERT_TRUE(std::isnan(sw));
    } else {
      ASSERT_EQ(Bits(hw), Bits(sw)) << std::hex << h;
    }
  }
  auto check = [](uint32_t bits) {
    const float value = FromBits(bits);
    if (std::isnan(value)) {
      ASSERT_TRUE(IsHalfNaN(F32ToFp16(value))) << std::hex << bits;
      return;
    }
    ASSERT_EQ(F32ToFp16(value), HardwareF32ToFp16(value)) << std::hex << bits;
  };
  // Every 4099th f32 pattern (a prime stride, so all low-bit patterns occur) ...
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) check(static_cast<uint32_t>(bits));
  // ... all f32s in the binades where halves are subnormal or tiny, at a finer stride ...
  for (uint32_t bits = 0x32800000u; bits < 0x38800000u; bits += 37) {
    check(bits);
    check(bits | 0x80000000u);
  }
  // ... and random ones.
  std::mt19937 rng(12345);
  for (int i = 0; i < 1'000'000; ++i) check(static_cast<uint32_t>(rng()));
}
#endif

TEST(DTypeTest, LoadAndStoreDispatchOnDType) {
  float f32[2] = {0, 0};
  uint16_t b16[2] = {0, 0};
  uint16_t f16[2] = {0, 0};
  StoreFromF32(f32, DType::kF32, 1, 1.1f);
  StoreFromF32(b16, DType::kBF16, 1, 1.1f);
  StoreFromF32(f16, DType::kF16, 1, 1.1f);
  EXPECT_EQ(f32[1], 1.1f);
  EXPECT_EQ(b16[1], F32ToBf16(1.1f));
  EXPECT_EQ(f16[1], F32ToFp16(1.1f));
  EXPECT_EQ(LoadAsF32(f32, DType::kF32, 1), 1.1f);
  EXPECT_EQ(LoadAsF32(b16, DType::kBF16, 1), Bf16ToF32(F32ToBf16(1.1f)));
  EXPECT_EQ(LoadAsF32(f16, DType::kF16, 1), Fp16ToF32(F32ToFp16(1.1f)));
  EXPECT_EQ(f32[0], 0.0f);
  EXPECT_EQ(b16[0], 0u);
  EXPECT_EQ(f16[0], 0u);
}

}  // namespace
}  // namespace loom
