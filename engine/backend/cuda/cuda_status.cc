#include "engine/backend/cuda/cuda_status.h"

#include "engine/api/executor.h"
#include "engine/common/strings.h"

namespace loom {

bool IsStickyCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
    case cudaErrorExternalDevice:
    case cudaErrorCudartUnloading:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

absl::Status CudaStatus(cudaError_t error, std::string_view what, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message = StrCat(what, " at ", file, ":", line, ": ", cudaGetErrorName(error),
                                     ": ", cudaGetErrorString(error));
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  absl::Status status = absl::InternalError(message);
  return IsStickyCudaError(error) ? MarkFatalDeviceError(std::move(status)) : status;
}

absl::Status CublasStatus(cublasStatus_t status, std::string_view what, const char* file,
                          int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = StrCat(what, " at ", file, ":", line, ": ",
                                     cublasGetStatusName(status), ": ",
                                     cublasGetStatusString(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  // An execution failure inside cuBLAS is a kernel fault: the context is as lost as after one
  // of ours.
  absl::Status result = absl::InternalError(message);
  return status == CUBLAS_STATUS_EXECUTION_FAILED ? MarkFatalDeviceError(std::move(result))
                                                  : result;
}

}  // namespace loom
