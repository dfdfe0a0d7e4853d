// AVX2 row kernels for kernels/cpu/elementwise.h. Each function handles one row (one token) with
// 8-lane vectors and a scalar tail; the caller splits rows across threads.
#include <cmath>
#include <cstring>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/simd_avx2.h"

namespace loom::cpu::avx2 {
namespace {

using namespace simd_avx2;  // NOLINT: local vector vocabulary

// Loads 8 consecutive weight values starting at index i as f32.
inline Vec LoadWeight(const void* w, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16: return LoadBf16(static_cast<const uint16_t*>(w) + i);
    case DType::kF16: return LoadF16(static_cast<const uint16_t*>(w) + i);
    default: return Load(static_cast<const float*>(w) + i);
  }
}

}  // namespace

void RmsNormRow(const float* x, int32_t dim, const void* weight, DType weight_dtype, float eps,
                float* out) {
  Vec acc = Zero();
  int32_t i = 0;
  for (; i + kLanes <= dim; i += kLanes) {
    const Vec v = Load(x + i);
    acc = Fma(v, v, acc);
  }
  float sum_sq = ReduceAdd(acc);
  for (; i < dim; ++i) sum_sq += x[i] * x[i];
  const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
  const Vec scale = Set1(inv_rms);
  i = 0;
  for (; i + kLanes <= dim; i += kLanes) {
    Store(out + i, Mul(Mul(Load(x + i), scale), LoadWeight(weight, weight_dtype, i)));
  }
  for (; i < dim; ++i) out[i] = x[i] * inv_rms * LoadAsF32(weight, weight_dtype, i);
}

void AddRow(float* residual, const float* delta, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(residual + i, Add(Load(residual + i), Load(delta + i)));
  for (; i < n; ++i) residual[i] += delta[i];
}

void RopeRow(float* x, int32_t num_heads, int32_t head_dim, int32_t rotary_dim, const float* cos,
             const float* sin) {
  const int32_t half = rotary_dim / 2;
  for (int32_t h = 0; h < num_heads; ++h) {
    float* a = x + int64_t{h} * head_dim;
    float* b = a + half;
    int32_t i = 0;
    for (; i + kLanes <= half; i += kLanes) {
      const Vec va = Load(a + i), vb = Load(b + i), c = Load(cos + i), s = Load(sin + i);
      Store(a + i, Sub(Mul(va, c), Mul(vb, s)));
      Store(b + i, Fma(va, s, Mul(vb, c)));
    }
    for (; i < half; ++i) {
      const float va = a[i], vb = b[i];
      a[i] = va * cos[i] - vb * sin[i];
      b[i] = vb * cos[i] + va * sin[i];
    }
  }
}

void SiluMulRow(const float* gate, const float* up, int32_t dim, float* out) {
  int32_t i = 0;
  const Vec one = Set1(1.0f);
  for (; i + kLanes <= dim; i += kLanes) {
    const Vec g = Load(gate + i);
    const Vec silu = _mm256_div_ps(g, Add(one, Exp(Sub(Zero(), g))));
    Store(out + i, Mul(silu, Load(up + i)));
  }
  for (; i < dim; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void ConvertRow(const float* in, int32_t n, DType dtype, void* out) {
  if (dtype == DType::kF32) {
    std::memcpy(out, in, sizeof(float) * n);
    return;
  }
  uint16_t* dst = static_cast<uint16_t*>(out);
  int32_t i = 0;
  if (dtype == DType::kF16) {
    for (; i + kLanes <= n; i += kLanes) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(Load(in + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) dst[i] = F32ToFp16(in[i]);
    return;
  }
  for (; i < n; ++i) dst[i] = F32ToBf16(in[i]);
}

void LoadRow(const void* in, DType dtype, int32_t n, float* out) {
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(out + i, LoadWeight(in, dtype, i));
  for (; i < n; ++i) out[i] = LoadAsF32(in, dtype, i);
}

}  // namespace loom::cpu::avx2
