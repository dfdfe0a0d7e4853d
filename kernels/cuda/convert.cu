#include "kernels/cuda/convert.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

int BlocksFor(int64_t elements) {
  return static_cast<int>(std::clamp<int64_t>((elements + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

template <typename T>
__global__ void ConvertRowsKernel(const float* x, int64_t x_stride, int32_t cols, int64_t total,
                                  T* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols;
    const int64_t c = i - r * cols;
    out[i] = internal::FromF32<T>(x[r * x_stride + c]);
  }
}

__global__ void AddBiasKernel(float* out, int64_t out_stride, int32_t cols, int64_t total,
                              const float* bias) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols;
    const int64_t c = i - r * cols;
    out[r * out_stride + c] += bias[c];
  }
}

__global__ void AddKernel(float* residual, const float* delta, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    residual[i] += delta[i];
  }
}

}  // namespace

cudaError_t ConvertRows(const float* x, int64_t x_stride, int32_t num_rows, int32_t cols,
                        DType dtype, void* out, cudaStream_t stream) {
  if (num_rows < 0 || cols < 0 || x_stride < cols) return cudaErrorInvalidValue;
  const int64_t total = int64_t{num_rows} * cols;
  if (total == 0) return cudaSuccess;
  const int blocks = BlocksFor(total);
  switch (dtype) {
    case DType::kF32:
      ConvertRowsKernel<float><<<blocks, kThreads, 0, stream>>>(x, x_stride, cols, total,
                                                                static_cast<float*>(out));
      break;
    case DType::kBF16:
      ConvertRowsKernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(
          x, x_stride, cols, total, static_cast<__nv_bfloat16*>(out));
      break;
    case DType::kF16:
      ConvertRowsKernel<__half><<<blocks, kThreads, 0, stream>>>(x, x_stride, cols, total,
                                                                 static_cast<__half*>(out));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t AddBias(float* out, int64_t out_stride, int32_t num_rows, int32_t cols,
                    const float* bias, cudaStream_t stream) {
  if (num_rows < 0 || cols < 0 || out_stride < cols) return cudaErrorInvalidValue;
  const int64_t total = int64_t{num_rows} * cols;
  if (total == 0) return cudaSuccess;
  AddBiasKernel<<<BlocksFor(total), kThreads, 0, stream>>>(out, out_stride, cols, total, bias);
  return cudaGetLastError();
}

cudaError_t Add(float* residual, const float* delta, int64_t num_elements, cudaStream_t stream) {
  if (num_elements < 0) return cudaErrorInvalidValue;
  if (num_elements == 0) return cudaSuccess;
  AddKernel<<<BlocksFor(num_elements), kThreads, 0, stream>>>(residual, delta, num_elements);
  return cudaGetLastError();
}

}  // namespace loom::cuda
