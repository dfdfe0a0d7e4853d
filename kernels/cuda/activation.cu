// SiLU(gate) * up; the contract (math, work split, bytes moved) is in activation.h.
#include "kernels/cuda/activation.h"

#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

using internal::LoadF32;
using internal::StoreF32;

constexpr int kMaxThreads = 256;
constexpr int kMaxVec = 4;

template <int kVec>
__global__ void SiluMulKernel(const float* gate, int64_t gate_stride, const float* up,
                              int64_t up_stride, int32_t num_rows, int32_t dim, float* out,
                              int64_t out_stride) {
  const int32_t num_vecs = dim / kVec;
  for (int64_t r = blockIdx.x; r < num_rows; r += gridDim.x) {
    for (int32_t j = threadIdx.x; j < num_vecs; j += blockDim.x) {
      const int64_t col = int64_t{j} * kVec;
      float g[kVec], u[kVec], o[kVec];
      LoadF32(gate + r * gate_stride + col, g);
      LoadF32(up + r * up_stride + col, u);
#pragma unroll
      for (int i = 0; i < kVec; ++i) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
      StoreF32(out + r * out_stride + col, o);
    }
  }
}

}  // namespace

cudaError_t SiluMul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                    int32_t num_rows, int32_t dim, float* out, int64_t out_stride,
                    cudaStream_t stream) {
  if (num_rows < 0 || dim < 0) return cudaErrorInvalidValue;
  if (num_rows == 0 || dim == 0) return cudaSuccess;
  const int vec = internal::PickVecWidth(
      kMaxVec, {dim, gate_stride, up_stride, out_stride},
      {{gate, sizeof(float)}, {up, sizeof(float)}, {out, sizeof(float)}});
  return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
    constexpr int kVec = decltype(vec_tag)::value;
    const int threads = internal::ThreadsForItems(dim / kVec, kMaxThreads);
    SiluMulKernel<kVec><<<internal::GridForRows(num_rows), threads, 0, stream>>>(
        gate, gate_stride, up, up_stride, num_rows, dim, out, out_stride);
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda
