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
  // Block-quantized weight formats, bit-compatible with GGUF/ggml's types of the same name. A row
  // of such a tensor is a whole number of blocks; each block codes `block_elems` consecutive
  // elements of the row in `block_bytes` bytes (layouts in kernels/ref/quant_ref.h).
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  // KV-cache storage formats (kernels/common/kv_format.h). kF8E4M3 is an element type (OCP FP8
  // E4M3, saturating at +-448). The kKvInt* formats are asymmetric min/max integer codes packed
  // in a backend's code order (token rows or dot-product lanes), with f16 scales and zeros
  // beside the codes.
  kF8E4M3,
  kKvInt8,
  kKvInt4,
  kKvInt2,
};

// What every storage format is, as data: the one table that sizes rows and names formats. Ops
// dispatch on the DType; a format without a kernel is refused when the weights are bound.
struct DTypeTraits {
  std::string_view name;  // lower case: "bf16", "q4_k", ...
  int32_t block_elems;    // elements coded together (1 for the element types)
  int32_t block_bytes;    // bytes of one block (the element size for the element types)
  bool is_float;          // f32 / f16 / bf16: a weight, norm or KV element type
  bool is_quantized;      // block-quantized: a matrix weight format only
  int32_t kv_code_bits = 0;  // bits of one code of a low-bit KV format; 0 for the others
};

constexpr DTypeTraits TraitsOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return {"f32", 1, 4, true, false};
    case DType::kF16: return {"f16", 1, 2, true, false};
    case DType::kBF16: return {"bf16", 1, 2, true, false};
    case DType::kF64: return {"f64", 1, 8, false, false};
    case DType::kI8: return {"i8", 1, 1, false, false};
    case DType::kU8: return {"u8", 1, 1, false, false};
    case DType::kI16: return {"i16", 1, 2, false, false};
    case DType::kI32: return {"i32", 1, 4, false, false};
    case DType::kI64: return {"i64", 1, 8, false, false};
    case DType::kBool: return {"bool", 1, 1, false, false};
    case DType::kQ8_0: return {"q8_0", 32, 34, false, true};
    case DType::kQ4_0: return {"q4_0", 32, 18, false, true};
    case DType::kQ4_1: return {"q4_1", 32, 20, false, true};
    case DType::kQ4_K: return {"q4_k", 256, 144, false, true};
    case DType::kQ5_K: return {"q5_k", 256, 176, false, true};
    case DType::kQ6_K: return {"q6_k", 256, 210, false, true};
    case DType::kF8E4M3: return {"fp8-e4m3", 1, 1, false, false};
    case DType::kKvInt8: return {"int8", 32, 32, false, false, 8};
    case DType::kKvInt4: return {"int4", 32, 16, false, false, 4};
    case DType::kKvInt2: return {"int2", 32, 8, false, false, 2};
  }
  return {"?", 1, 0, false, false};
}

// True for the block-quantized formats.
constexpr bool IsQuantizedDType(DType dtype) { return TraitsOf(dtype).is_quantized; }

// True when a row of `cols` elements is a whole number of blocks of `dtype`.
constexpr bool RowFitsBlocks(DType dtype, int64_t cols) {
  return cols >= 0 && cols % TraitsOf(dtype).block_elems == 0;
}

// Bytes of one row of `cols` elements (cols a whole number of blocks; see RowFitsBlocks).
constexpr int64_t DTypeRowBytes(DType dtype, int64_t cols) {
  const DTypeTraits t = TraitsOf(dtype);
  return cols / t.block_elems * t.block_bytes;
}

// Size of one element in bytes; 0 for the block-quantized formats (use DTypeRowBytes).
constexpr size_t DTypeSize(DType dtype) {
  const DTypeTraits t = TraitsOf(dtype);
  return t.block_elems == 1 ? static_cast<size_t>(t.block_bytes) : 0;
}

// Lower-case name ("bf16", "f32", "q4_k", ...) for messages and JSON output.
constexpr std::string_view DTypeName(DType dtype) { return TraitsOf(dtype).name; }

// True for the floating-point types a weight or a KV cache may be stored in.
constexpr bool IsFloatDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

// True for the low-bit KV formats (integer codes with scales, zeros and a residual tail).
constexpr bool IsLowBitKvDType(DType dtype) { return TraitsOf(dtype).kv_code_bits > 0; }

// True for every format a KV cache may be stored in.
constexpr bool IsKvCacheDType(DType dtype) {
  return IsFloatDType(dtype) || dtype == DType::kF8E4M3 || IsLowBitKvDType(dtype);
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

// OCP FP8 E4M3 (bias 7, no infinities, 0x7f/0xff NaN, largest finite 448) -> f32, exact.
inline float Fp8E4M3ToF32(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  uint32_t bits;
  if (exponent == 0xf && mantissa == 0x7) {
    bits = sign | 0x7fc00000u;
  } else if (exponent != 0) {
    bits = sign | ((exponent + 120) << 23) | (mantissa << 20);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal: mantissa * 2^-9.
    float out = static_cast<float>(mantissa) * (1.0f / 512.0f);
    return sign ? -out : out;
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// f32 -> OCP FP8 E4M3, round to nearest even, saturating to +-448 (a cache never holds an
// infinity); NaN stays NaN.
inline uint8_t F32ToFp8E4M3(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7fu;
  if (abs_bits >= 0x43e00000u) return sign | 0x7eu;  // >= 448 (and infinity): saturate
  const int32_t exponent = static_cast<int32_t>(abs_bits >> 23) - 127;
  if (exponent < -6) {
    // Subnormal range: multiples of 2^-9, round half to even on the scaled value.
    float abs_value;
    std::memcpy(&abs_value, &abs_bits, sizeof(abs_value));
    const float scaled = abs_value * 512.0f;
    uint32_t m = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(m);
    if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;
    return static_cast<uint8_t>(sign | m);  // m == 8 is the smallest normal, 0x08
  }
  uint32_t mantissa = abs_bits & 0x7fffffu;
  uint32_t result = (static_cast<uint32_t>(exponent + 7) << 3) | (mantissa >> 20);
  const uint32_t remainder = mantissa & 0xfffffu;
  if (remainder > 0x80000u || (remainder == 0x80000u && (result & 1u))) ++result;
  if (result > 0x7eu) result = 0x7eu;
  return static_cast<uint8_t>(sign | result);
}

// Reads element `index` of a float-typed buffer as f32.
inline float LoadAsF32(const void* data, DType dtype, size_t index) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[index];
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(data)[index]);
    case DType::kF16: return Fp16ToF32(static_cast<const uint16_t*>(data)[index]);
    case DType::kF8E4M3: return Fp8E4M3ToF32(static_cast<const uint8_t*>(data)[index]);
    default: return 0.0f;
  }
}

// Writes `value` as element `index` of a float-typed buffer, rounding to nearest even.
inline void StoreFromF32(void* data, DType dtype, size_t index, float value) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(data)[index] = value; break;
    case DType::kBF16: static_cast<uint16_t*>(data)[index] = F32ToBf16(value); break;
    case DType::kF16: static_cast<uint16_t*>(data)[index] = F32ToFp16(value); break;
    case DType::kF8E4M3: static_cast<uint8_t*>(data)[index] = F32ToFp8E4M3(value); break;
    default: break;
  }
}

}  // namespace loom
