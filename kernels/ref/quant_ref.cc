#include "kernels/ref/quant_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace loom::ref {
namespace {

float Half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return Fp16ToF32(bits);
}

// Stores `value` as a half at p and returns the value the half holds.
float PutHalf(uint8_t* p, float value) {
  const uint16_t bits = F32ToFp16(value);
  std::memcpy(p, &bits, 2);
  return Fp16ToF32(bits);
}

int RoundClamp(float v, int lo, int hi) {
  const int q = static_cast<int>(std::lround(v));
  return std::clamp(q, lo, hi);
}

void DequantizeBlock(DType dtype, const uint8_t* b, float* y) {
  switch (dtype) {
    case DType::kQ8_0: {
      const float d = Half(b);
      for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
      return;
    }
    case DType::kQ4_0: {
      const float d = Half(b);
      const uint8_t* qs = b + 2;
      for (int i = 0; i < 16; ++i) {
        y[i] = d * static_cast<float>((qs[i] & 15) - 8);
        y[i + 16] = d * static_cast<float>((qs[i] >> 4) - 8);
      }
      return;
    }
    case DType::kQ4_1: {
      const float d = Half(b);
      const float m = Half(b + 2);
      const uint8_t* qs = b + 4;
      for (int i = 0; i < 16; ++i) {
        y[i] = d * static_cast<float>(qs[i] & 15) + m;
        y[i + 16] = d * static_cast<float>(qs[i] >> 4) + m;
      }
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const bool five = dtype == DType::kQ5_K;
      const float d = Half(b);
      const float dmin = Half(b + 2);
      const uint8_t* scales = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = five ? b + 48 : b + 16;
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, mn;
        ScaleMinK4(j, scales, &sc, &mn);
        const float dj = d * static_cast<float>(sc);
        const float mj = dmin * static_cast<float>(mn);
        const uint8_t* q = qs + 32 * (j / 2);
        const int shift = 4 * (j & 1);
        for (int l = 0; l < 32; ++l) {
          int v = (q[l] >> shift) & 15;
          if (five && ((qh[l] >> j) & 1)) v += 16;
          y[32 * j + l] = dj * static_cast<float>(v) - mj;
        }
      }
      return;
    }
    case DType::kQ6_K: {
      const float d = Half(b + 208);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b + 64 * h;
        const uint8_t* qh = b + 128 + 32 * h;
        const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h;
        for (int g = 0; g < 4; ++g) {
          for (int l = 0; l < 32; ++l) {
            const int low = (ql[l + 32 * (g & 1)] >> (4 * (g >> 1))) & 15;
            const int high = (qh[l] >> (2 * g)) & 3;
            const int q = (low | (high << 4)) - 32;
            y[128 * h + 32 * g + l] =
                d * static_cast<float>(sc[g * 2 + l / 16]) * static_cast<float>(q);
          }
        }
      }
      return;
    }
    default:
      return;
  }
}

// q4_k / q5_k: `levels` is 15 or 31.
void QuantizeK(const float* x, uint8_t* b, bool five) {
  const int levels = five ? 31 : 15;
  float scale[8], min[8];
  for (int j = 0; j < 8; ++j) {
    float lo = 0.0f, hi = 0.0f;
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, x[32 * j + l]);
      hi = std::max(hi, x[32 * j + l]);
    }
    scale[j] = (hi - lo) / static_cast<float>(levels);
    min[j] = -lo;
  }
  const float max_scale = *std::max_element(scale, scale + 8);
  const float max_min = *std::max_element(min, min + 8);
  const float d = PutHalf(b, max_scale / 63.0f);
  const float dmin = PutHalf(b + 2, max_min / 63.0f);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0 ? RoundClamp(scale[j] / d, 0, 63) : 0);
    mn[j] = static_cast<uint8_t>(dmin > 0 ? RoundClamp(min[j] / dmin, 0, 63) : 0);
  }
  uint8_t* scales = b + 4;
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  uint8_t* qh = b + 16;
  uint8_t* qs = five ? b + 48 : b + 16;
  if (five) std::memset(qh, 0, 32);
  std::memset(qs, 0, 128);
  for (int j = 0; j < 8; ++j) {
    const float dj = d * static_cast<float>(sc[j]);
    const float mj = dmin * static_cast<float>(mn[j]);
    for (int l = 0; l < 32; ++l) {
      const int q = dj > 0 ? RoundClamp((x[32 * j + l] + mj) / dj, 0, levels) : 0;
      qs[32 * (j / 2) + l] |= static_cast<uint8_t>((q & 15) << (4 * (j & 1)));
      if (five && q >= 16) qh[l] |= static_cast<uint8_t>(1u << j);
    }
  }
}

void QuantizeBlock(DType dtype, const float* x, uint8_t* b) {
  switch (dtype) {
    case DType::kQ8_0: {
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float d = PutHalf(b, amax / 127.0f);
      for (int i = 0; i < 32; ++i) {
        b[2 + i] =
            static_cast<uint8_t>(static_cast<int8_t>(d > 0 ? RoundClamp(x[i] / d, -127, 127) : 0));
      }
      return;
    }
    case DType::kQ4_0: {
      float extreme = 0.0f;  // the value of largest magnitude, sign kept
      for (int i = 0; i < 32; ++i) {
        if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
      }
      const float d = PutHalf(b, extreme / -8.0f);
      for (int i = 0; i < 16; ++i) {
        const int lo = d != 0 ? RoundClamp(x[i] / d + 8.0f, 0, 15) : 8;
        const int hi = d != 0 ? RoundClamp(x[i + 16] / d + 8.0f, 0, 15) : 8;
        b[2 + i] = static_cast<uint8_t>(lo | (hi << 4));
      }
      return;
    }
    case DType::kQ4_1: {
      float lo = x[0], hi = x[0];
      for (int i = 1; i < 32; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
      }
      const float d = PutHalf(b, (hi - lo) / 15.0f);
      const float m = PutHalf(b + 2, lo);
      for (int i = 0; i < 16; ++i) {
        const int q0 = d > 0 ? RoundClamp((x[i] - m) / d, 0, 15) : 0;
        const int q1 = d > 0 ? RoundClamp((x[i + 16] - m) / d, 0, 15) : 0;
        b[4 + i] = static_cast<uint8_t>(q0 | (q1 << 4));
      }
      return;
    }
    case DType::kQ4_K:
      QuantizeK(x, b, false);
      return;
    case DType::kQ5_K:
      QuantizeK(x, b, true);
      return;
    case DType::kQ6_K: {
      float scale[16];
      float max_abs_scale = 0.0f;
      for (int s = 0; s < 16; ++s) {
        float extreme = 0.0f;
        for (int l = 0; l < 16; ++l) {
          if (std::fabs(x[16 * s + l]) > std::fabs(extreme)) extreme = x[16 * s + l];
        }
        scale[s] = extreme / -32.0f;
        max_abs_scale = std::max(max_abs_scale, std::fabs(scale[s]));
      }
      const float d = PutHalf(b + 208, max_abs_scale / 127.0f);
      int8_t* sc = reinterpret_cast<int8_t*>(b + 192);
      for (int s = 0; s < 16; ++s) {
        sc[s] = static_cast<int8_t>(d > 0 ? RoundClamp(scale[s] / d, -127, 127) : 0);
      }
      std::memset(b, 0, 192);
      for (int h = 0; h < 2; ++h) {
        uint8_t* ql = b + 64 * h;
        uint8_t* qh = b + 128 + 32 * h;
        for (int g = 0; g < 4; ++g) {
          for (int l = 0; l < 32; ++l) {
            const int index = 128 * h + 32 * g + l;
            const float step = d * static_cast<float>(sc[8 * h + g * 2 + l / 16]);
            const int q = (step != 0 ? RoundClamp(x[index] / step, -32, 31) : 0) + 32;
            ql[l + 32 * (g & 1)] |= static_cast<uint8_t>((q & 15) << (4 * (g >> 1)));
            qh[l] |= static_cast<uint8_t>((q >> 4) << (2 * g));
          }
        }
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace

void ScaleMinK4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void DequantizeRow(DType dtype, const void* row, int64_t n, float* out) {
  const DTypeTraits t = TraitsOf(dtype);
  if (!t.is_quantized) {
    for (int64_t i = 0; i < n; ++i) out[i] = LoadAsF32(row, dtype, static_cast<size_t>(i));
    return;
  }
  const auto* bytes = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < n / t.block_elems; ++b) {
    DequantizeBlock(dtype, bytes + b * t.block_bytes, out + b * t.block_elems);
  }
}

void QuantizeRow(DType dtype, const float* x, int64_t n, void* row) {
  const DTypeTraits t = TraitsOf(dtype);
  if (!t.is_quantized) {
    for (int64_t i = 0; i < n; ++i) StoreFromF32(row, dtype, static_cast<size_t>(i), x[i]);
    return;
  }
  auto* bytes = static_cast<uint8_t*>(row);
  for (int64_t b = 0; b < n / t.block_elems; ++b) {
    QuantizeBlock(dtype, x + b * t.block_elems, bytes + b * t.block_bytes);
  }
}

}  // namespace loom::ref
