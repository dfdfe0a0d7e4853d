#include "kernels/ref/matmul_ref.h"

#include <cstddef>

namespace loom::ref {

void Matmul(const float* x, int64_t m, int64_t k, int64_t x_stride, const void* weight,
            DType weight_dtype, int64_t n, const float* bias, float* y, int64_t y_stride) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * x_stride;
    for (int64_t j = 0; j < n; ++j) {
      const size_t row = static_cast<size_t>(j) * static_cast<size_t>(k);
      float sum = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) sum += xi[kk] * LoadAsF32(weight, weight_dtype, row + kk);
      y[i * y_stride + j] = bias != nullptr ? sum + bias[j] : sum;
    }
  }
}

}  // namespace loom::ref
