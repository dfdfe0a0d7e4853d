#include "kernels/cuda/hadamard.h"

#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

__global__ void HadamardKernel(float* x, int64_t num_rows, int32_t dim, float norm) {
  extern __shared__ float row[];
  const int t = threadIdx.x;  // owns pair t of each pass; dim / 2 threads
  for (int64_t r = blockIdx.x; r < num_rows; r += gridDim.x) {
    float* src = x + r * dim;
    row[t] = src[t];
    row[t + dim / 2] = src[t + dim / 2];
    __syncthreads();
    for (int h = 1; h < dim; h *= 2) {
      const int i = (t / h) * 2 * h + (t % h);
      const float a = row[i], b = row[i + h];
      __syncthreads();
      row[i] = a + b;
      row[i + h] = a - b;
      __syncthreads();
    }
    src[t] = row[t] * norm;
    src[t + dim / 2] = row[t + dim / 2] * norm;
    __syncthreads();  // the next row reuses `row`
  }
}

}  // namespace

cudaError_t HadamardRotate(float* x, int64_t num_rows, int32_t dim, cudaStream_t stream) {
  if (num_rows < 0 || dim < 2 || dim > 1024 || (dim & (dim - 1)) != 0) {
    return cudaErrorInvalidValue;
  }
  if (num_rows == 0) return cudaSuccess;
  const float norm = 1.0f / sqrtf(static_cast<float>(dim));
  HadamardKernel<<<internal::GridForRows(num_rows), dim / 2, dim * sizeof(float), stream>>>(
      x, num_rows, dim, norm);
  return cudaGetLastError();
}

}  // namespace loom::cuda
