// CUDA Hadamard rotation of rows in place (the basis a Hadamard-rotated KV cache is stored in):
//
//   x[r, :] <- H x[r, :] / sqrt(dim),   H[i][j] = (-1)^popcount(i & j),  dim a power of two <= 1024
//   x: [num_rows, dim] f32, contiguous
//
// Work split: one block per row (blocks loop over rows past the grid), dim / 2 threads; the row
// sits in shared memory while log2(dim) butterfly passes turn each pair (j, j + h) into
// (a + b, a - b); then the scale. Sums and differences in f32, as the CPU kernel does (the same
// values up to summation order). Bytes moved: 8 * num_rows * dim.
//
// Plain C++ header: the launcher takes a device pointer and a stream, queues the kernel and
// returns the launch error; it never allocates or synchronises.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace loom::cuda {

// Returns cudaErrorInvalidValue for a negative row count or a dim that is not a power of two in
// [2, 1024]; cudaSuccess without a launch when num_rows is 0.
cudaError_t HadamardRotate(float* x, int64_t num_rows, int32_t dim, cudaStream_t stream);

}  // namespace loom::cuda
