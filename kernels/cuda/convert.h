// CUDA element-wise helpers around the dense matmuls: f32 activations to the 16-bit type the
// tensor cores take, the bias epilogue, and the residual add.
//
//   ConvertRows:  out[r, c] = dtype(x[r, c])       x: [num_rows, cols] f32, row stride x_stride;
//                                                  out: [num_rows, cols] of dtype, contiguous
//   AddBias:      out[r, c] += bias[c]             out: [num_rows, cols] f32, row stride
//   Add:          residual[i] += delta[i]          i < num_elements, both f32, contiguous
//
// Work split: grid-stride loops, one element per thread per iteration (256-thread blocks, at most
// 4096 blocks); these run once per matmul on activations that are tiny next to the weights, so
// simplicity wins over vector widths here. Conversions round to nearest even (bit-identical to
// StoreFromF32 in kernels/common/dtype.h).
// Bytes moved: ConvertRows 4 + sizeof(dtype) per element; AddBias 8 per element (+ the bias, an
// L2 hit); Add 12 per element.
//
// Plain C++ header: launchers take device pointers and a stream, queue the kernel and return the
// launch error; they never allocate or synchronise.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/dtype.h"

namespace loom::cuda {

// dtype: kF32, kBF16 or kF16 (cudaErrorInvalidValue otherwise, or for negative sizes).
cudaError_t ConvertRows(const float* x, int64_t x_stride, int32_t num_rows, int32_t cols,
                        DType dtype, void* out, cudaStream_t stream);

cudaError_t AddBias(float* out, int64_t out_stride, int32_t num_rows, int32_t cols,
                    const float* bias, cudaStream_t stream);

cudaError_t Add(float* residual, const float* delta, int64_t num_elements, cudaStream_t stream);

}  // namespace loom::cuda
