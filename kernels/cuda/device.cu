#include "kernels/cuda/device.h"

#include <cstdio>
#include <cstdlib>

// Returns the error of a runtime call from the enclosing function unless it is cudaSuccess.
#define LOOM_RETURN_IF_CUDA_ERROR(expr)                          \
  do {                                                           \
    const cudaError_t loom_cuda_error = (expr);                  \
    if (loom_cuda_error != cudaSuccess) return loom_cuda_error;  \
  } while (false)

namespace loom::cuda {
namespace {

// Frees what MeasureCopyBandwidth acquired, whichever step it returned from.
struct CopyBenchResources {
  void* src = nullptr;
  void* dst = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;

  ~CopyBenchResources() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (src != nullptr) cudaFree(src);
    if (dst != nullptr) cudaFree(dst);
  }
};

}  // namespace

bool CudaDeviceAvailable() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clears cudaErrorNoDevice; an initialisation error stays
    return false;
  }
  return count > 0;
}

cudaError_t QueryCudaDevice(int device, CudaDeviceInfo* info) {
  cudaDeviceProp prop{};
  LOOM_RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, device));
  int previous = 0;
  LOOM_RETURN_IF_CUDA_ERROR(cudaGetDevice(&previous));
  LOOM_RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t mem_error = cudaMemGetInfo(&free_bytes, &total_bytes);
  LOOM_RETURN_IF_CUDA_ERROR(cudaSetDevice(previous));
  LOOM_RETURN_IF_CUDA_ERROR(mem_error);
  info->device = device;
  info->name = prop.name;
  info->compute_major = prop.major;
  info->compute_minor = prop.minor;
  info->sm_count = prop.multiProcessorCount;
  info->total_memory_bytes = total_bytes;
  info->free_memory_bytes = free_bytes;
  info->l2_cache_bytes = static_cast<size_t>(prop.l2CacheSize);
  info->memory_bus_width_bits = prop.memoryBusWidth;
  return cudaSuccess;
}

cudaError_t MeasureCopyBandwidth(size_t bytes, int repeats, double* bytes_per_second) {
  if (bytes == 0 || repeats <= 0 || bytes_per_second == nullptr) return cudaErrorInvalidValue;
  CopyBenchResources r;
  LOOM_RETURN_IF_CUDA_ERROR(cudaMalloc(&r.src, bytes));
  LOOM_RETURN_IF_CUDA_ERROR(cudaMalloc(&r.dst, bytes));
  LOOM_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
  LOOM_RETURN_IF_CUDA_ERROR(cudaEventCreate(&r.start));
  LOOM_RETURN_IF_CUDA_ERROR(cudaEventCreate(&r.stop));
  LOOM_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(r.src, 0x5a, bytes, r.stream));
  LOOM_RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(r.dst, r.src, bytes, cudaMemcpyDeviceToDevice, r.stream));
  LOOM_RETURN_IF_CUDA_ERROR(cudaEventRecord(r.start, r.stream));
  for (int i = 0; i < repeats; ++i) {
    // Alternate directions so no copy is a repeat the memory system could short-cut.
    void* to = i % 2 == 0 ? r.src : r.dst;
    const void* from = i % 2 == 0 ? r.dst : r.src;
    LOOM_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, r.stream));
  }
  LOOM_RETURN_IF_CUDA_ERROR(cudaEventRecord(r.stop, r.stream));
  LOOM_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(r.stop));
  float elapsed_ms = 0.0f;
  LOOM_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&elapsed_ms, r.start, r.stop));
  if (elapsed_ms <= 0.0f) return cudaErrorUnknown;
  *bytes_per_second = 2.0 * static_cast<double>(bytes) * repeats / (elapsed_ms * 1e-3);
  return cudaSuccess;
}

void CudaCheckFailed(cudaError_t error, const char* expr, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: %s failed: %s: %s\n", file, line, expr, cudaGetErrorName(error),
               cudaGetErrorString(error));
  std::fflush(stderr);
  std::abort();
}

}  // namespace loom::cuda
