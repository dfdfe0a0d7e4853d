// CUDA runtime and cuBLAS failures as absl::Status, with the call site.
//
// Every CUDA or cuBLAS call of the CUDA backend goes through these: a failure becomes a Status
// whose message names the call, the file and line, and the library's error name and text. A
// sticky runtime error (the device context is lost: an illegal address, a kernel fault, an
// uncorrectable ECC error) is additionally marked with MarkFatalDeviceError, so the engine loop
// fails everything and the process exits for its supervisor to restart it.
#pragma once

#include <string_view>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace loom {

// True for the runtime errors after which every later call on the context fails too.
bool IsStickyCudaError(cudaError_t error);

// OK for cudaSuccess. Otherwise ResourceExhausted for an allocation failure, Internal else,
// marked fatal when the error is sticky.
absl::Status CudaStatus(cudaError_t error, std::string_view what, const char* file, int line);
absl::Status CublasStatus(cublasStatus_t status, std::string_view what, const char* file,
                          int line);

}  // namespace loom

#define LOOM_CUDA_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                                   \
    ::absl::Status loom_cuda_status_ = ::loom::CudaStatus((expr), #expr, __FILE__, __LINE__); \
    if (!loom_cuda_status_.ok()) return loom_cuda_status_;                               \
  } while (false)

#define LOOM_CUBLAS_RETURN_IF_ERROR(expr)                                                  \
  do {                                                                                     \
    ::absl::Status loom_cublas_status_ = ::loom::CublasStatus((expr), #expr, __FILE__, __LINE__); \
    if (!loom_cublas_status_.ok()) return loom_cublas_status_;                             \
  } while (false)
