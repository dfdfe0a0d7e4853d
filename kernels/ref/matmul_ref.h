// Reference matrix multiply of the linear layers: y = x · W^T (+ bias).
//
// Obviously correct first: one scalar dot product per output, accumulated in f32 in increasing k
// order, no threads, no blocking. The optimised kernels in kernels/cpu (GEMV, FMA GEMM, AMX GEMM)
// are tested against it.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"

namespace loom::ref {

// y[i, j] = sum_k x[i, k] * weight[j, k] (+ bias[j]) for i < m, j < n.
//   x:      [m, k] f32, row stride x_stride (elements)
//   weight: [n, k] row-major in `weight_dtype` (kF32, kF16 or kBF16), rows packed (stride k); the
//           Hugging Face [out_features, in_features] layout
//   bias:   [n] f32 or nullptr
//   y:      [m, n] f32, row stride y_stride (elements)
void Matmul(const float* x, int64_t m, int64_t k, int64_t x_stride, const void* weight,
            DType weight_dtype, int64_t n, const float* bias, float* y, int64_t y_stride);

}  // namespace loom::ref
