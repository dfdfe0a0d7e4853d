// CUDA RMSNorm and fused residual-add + RMSNorm (Hugging Face RMSNorm: the weight multiplies the
// normalised row; no bias, no "1 + weight" offset).
//
//   RmsNorm:     out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight[:]
//   AddRmsNorm:  residual[r, :] += delta[r, :];  out[r, :] = RmsNorm(residual[r, :])
//   x, out:          [num_rows, dim] f32 with row strides (elements); out may alias x (same
//                    stride)
//   residual, delta: [num_rows, dim] f32, rows contiguous; out [num_rows, dim] f32, contiguous,
//                    must not alias residual (it may alias delta)
//   weight:          [dim] of weight_dtype (f32, bf16 or f16)
//
// Work split: one block per row (blocks loop over rows past 65536), blockDim a multiple of 32 up
// to 1024, sized so each thread owns at most 4 vectors of N elements (N = 4, 2 or 1: the widest
// that dim, the strides and the pointers' alignment allow). Pass 1 loads the thread's vectors
// (AddRmsNorm adds delta and stores the new residual there) into registers and sums their
// squares; the block reduces with warp shuffles and one shared-memory exchange between warps;
// pass 2 scales the registers and stores. Rows longer than blockDim * 4 vectors (dim > 16384 at
// N = 4) re-read the excess in pass 2 (an L1/L2 hit).
// Bytes moved per row: RmsNorm 8 * dim (read x, write out); AddRmsNorm 16 * dim (read residual
// and delta, write residual and out); the weight (dim * its size) stays in L2 across rows.
// Accuracy: the sum of squares is a tree reduction in f32 and rsqrtf is within 2 ulp, so results
// differ from ref::RmsNorm by a few ulp of f32 (the residual of AddRmsNorm is bit-identical).
//
// Plain C++ header: launchers take device pointers and a stream, queue the kernel and return the
// launch error; they never allocate or synchronise.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/dtype.h"

namespace loom::cuda {

// Returns cudaErrorInvalidValue for negative sizes or a non-float weight dtype; cudaSuccess
// without a launch when num_rows or dim is 0.
cudaError_t RmsNorm(const float* x, int64_t x_stride, int32_t num_rows, int32_t dim,
                    const void* weight, DType weight_dtype, float eps, float* out,
                    int64_t out_stride, cudaStream_t stream);

// Same errors as RmsNorm.
cudaError_t AddRmsNorm(float* residual, const float* delta, int32_t num_rows, int32_t dim,
                       const void* weight, DType weight_dtype, float eps, float* out,
                       cudaStream_t stream);

}  // namespace loom::cuda
