// Element types shared by every layer of loom, and exact scalar conversions between them.
//
// Kernels take raw pointers plus a DType; this header is the one place that names the types and
// their sizes. The conversions are the plain, portable definitions (round to nearest even); SIMD
// kernels use their own vector forms and are tested against these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace loom {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
};

// Size of one element in bytes.
constexpr size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

// Lower-case name ("bf16", "f32", ...) for messages and JSON output.
constexpr std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI16: return "i16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kBool: return "bool";
  }
  return "?";
}

// True for the floating-point types a weight or a KV cache may be stored in.
constexpr bool IsFloatDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

// bf16 -> f32 is exact: the bf16 bits are the high half of the f32 bits.
inline float Bf16ToF32(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

// f32 -> bf16, round to nearest even; NaN stays NaN.
inline uint16_t F32ToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// IEEE half -> f32, exact (subnormals, infinities and NaN included).
inline float Fp16ToF32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalise into an f32 exponent.
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// f32 -> IEEE half, round to nearest even; overflow gives infinity, NaN stays NaN.
inline uint16_t F32ToFp16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;                  // NaN
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;                 // rounds to >= 65520: inf
  if (abs_bits < 0x33000001u) return sign;                            // below half of min subnormal
  const int32_t exponent = static_cast<int32_t>(abs_bits >> 23) - 127;
  uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
  int shift;
  uint32_t base;
  if (exponent < -14) {  // subnormal half
    shift = 13 + (-14 - exponent);
    base = 0;
  } else {
    shift = 13;
    base = static_cast<uint32_t>(exponent + 15) << 10;
    mantissa &= 0x7fffffu;
  }
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  uint32_t result = base + (mantissa >> shift);
  if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}

// Reads element `index` of a float-typed buffer as f32.
inline float LoadAsF32(const void* data, DType dtype, size_t index) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[index];
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(data)[index]);
    case DType::kF16: return Fp16ToF32(static_cast<const uint16_t*>(data)[index]);
    default: return 0.0f;
  }
}

// Writes `value` as element `index` of a float-typed buffer, rounding to nearest even.
inline void StoreFromF32(void* data, DType dtype, size_t index, float value) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(data)[index] = value; break;
    case DType::kBF16: static_cast<uint16_t*>(data)[index] = F32ToBf16(value); break;
    case DType::kF16: static_cast<uint16_t*>(data)[index] = F32ToFp16(value); break;
    default: break;
  }
}

}  // namespace loom
