#include "engine/backend/cuda/cuda_backend.h"

#include <algorithm>

#include <cublas_v2.h>

#include "engine/backend/cuda/cuda_status.h"
#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "kernels/cuda/device.h"

namespace loom {

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const BackendOptions& options) {
  if (!cuda::CudaDeviceAvailable()) {
    return absl::FailedPreconditionError(
        "the CUDA backend needs an NVIDIA GPU and driver, and the CUDA runtime sees none");
  }
  int count = 0;
  LOOM_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        StrCat("CUDA device ", options.device, " does not exist (", count, " visible)"));
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  backend->device_ = options.device;
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&backend->stream_, cudaStreamNonBlocking));
  LOOM_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&backend->host_copies_, cudaEventDisableTiming));
  LOOM_CUBLAS_RETURN_IF_ERROR(cublasCreate(&backend->cublas_));
  LOOM_CUBLAS_RETURN_IF_ERROR(cublasSetStream(backend->cublas_, backend->stream_));
  backend->ops_ = std::make_unique<CudaOps>(backend->stream_, backend->cublas_);
  cuda::CudaDeviceInfo info;
  if (cuda::QueryCudaDevice(options.device, &info) == cudaSuccess) {
    LOOM_LOG(kInfo, "CUDA device ", options.device, ": ", info.name, ", sm_", info.compute_major,
             info.compute_minor, ", ", info.sm_count, " SMs, ",
             info.total_memory_bytes >> 20, " MiB");
  }
  return backend;
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  ops_.reset();
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (host_copies_ != nullptr) cudaEventDestroy(host_copies_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaBackend::BindThread() {
  const cudaError_t error = cudaSetDevice(device_);
  if (error != cudaSuccess) ops_->Record(CudaStatus(error, "cudaSetDevice", __FILE__, __LINE__));
}

absl::StatusOr<DeviceBuffer> CudaBackend::Allocate(int64_t bytes) {
  void* data = nullptr;
  const cudaError_t error = cudaMalloc(&data, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  if (error != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    return absl::ResourceExhaustedError(
        StrCat("cannot allocate ", bytes, " bytes of GPU memory: ", cudaGetErrorString(error)));
  }
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(data, 0, static_cast<size_t>(bytes), stream_));
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return DeviceBuffer(this, data, bytes);
}

void CudaBackend::Free(void* data, int64_t) {
  // cudaFree waits for the device; after a sticky error it fails, and there is nothing to do.
  cudaFree(data);
}

void CudaBackend::CopyToDevice(void* device_dst, const void* host_src, int64_t bytes) {
  if (bytes == 0) return;
  const cudaError_t error = cudaMemcpyAsync(device_dst, host_src, static_cast<size_t>(bytes),
                                            cudaMemcpyHostToDevice, stream_);
  if (error != cudaSuccess) ops_->Record(CudaStatus(error, "copy to device", __FILE__, __LINE__));
}

void CudaBackend::CopyToHost(void* host_dst, const void* device_src, int64_t bytes) {
  if (bytes == 0) return;
  cudaError_t error = cudaMemcpyAsync(host_dst, device_src, static_cast<size_t>(bytes),
                                      cudaMemcpyDeviceToHost, stream_);
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream_);
  if (error != cudaSuccess) ops_->Record(CudaStatus(error, "copy to host", __FILE__, __LINE__));
}

void CudaBackend::CopyToHostAsync(void* host_dst, const void* device_src, int64_t bytes) {
  if (bytes == 0) return;
  cudaError_t error = cudaMemcpyAsync(host_dst, device_src, static_cast<size_t>(bytes),
                                      cudaMemcpyDeviceToHost, stream_);
  if (error == cudaSuccess) error = cudaEventRecord(host_copies_, stream_);
  if (error != cudaSuccess) ops_->Record(CudaStatus(error, "copy to host", __FILE__, __LINE__));
}

absl::Status CudaBackend::WaitForHostCopies() {
  const cudaError_t error = cudaEventSynchronize(host_copies_);
  ops_->Record(CudaStatus(error, "cudaEventSynchronize", __FILE__, __LINE__));
  return ops_->TakeError();
}

void CudaBackend::CopyWithinDevice(void* device_dst, const void* device_src, int64_t bytes) {
  if (bytes == 0) return;
  const cudaError_t error = cudaMemcpyAsync(device_dst, device_src, static_cast<size_t>(bytes),
                                            cudaMemcpyDeviceToDevice, stream_);
  if (error != cudaSuccess) ops_->Record(CudaStatus(error, "device copy", __FILE__, __LINE__));
}

namespace {

void FreeHost(void* data) { cudaFreeHost(data); }

class CudaCopyQueue final : public CopyQueue {
 public:
  CudaCopyQueue(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaCopyQueue() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }

  absl::Status CopyToDevice(void* device_dst, const void* host_src, int64_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    // The calling thread is not the engine loop's: make the device current on it.
    LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_dst, host_src, static_cast<size_t>(bytes),
                                              cudaMemcpyHostToDevice, stream_));
    LOOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

 private:
  int device_;
  cudaStream_t stream_;
};

}  // namespace

absl::StatusOr<HostMemory> CudaBackend::AllocateHost(int64_t bytes) {
  void* data = nullptr;
  const cudaError_t error =
      cudaHostAlloc(&data, static_cast<size_t>(std::max<int64_t>(bytes, 1)), cudaHostAllocPortable);
  if (error != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it
    return absl::ResourceExhaustedError(StrCat("cannot allocate ", bytes,
                                               " bytes of page-locked host memory: ",
                                               cudaGetErrorString(error)));
  }
  return HostMemory(static_cast<uint8_t*>(data), HostMemoryRelease{&FreeHost});
}

absl::StatusOr<std::unique_ptr<CopyQueue>> CudaBackend::CreateCopyQueue() {
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  cudaStream_t stream = nullptr;
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return std::unique_ptr<CopyQueue>(new CudaCopyQueue(device_, stream));
}

absl::Status CudaBackend::Synchronize() {
  const cudaError_t error = cudaStreamSynchronize(stream_);
  ops_->Record(CudaStatus(error, "cudaStreamSynchronize", __FILE__, __LINE__));
  // A kernel fault shows up at the next synchronisation; launch errors are kept by the ops.
  return ops_->TakeError();
}

std::optional<Backend::MemoryInfo> CudaBackend::DeviceMemory() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return std::nullopt;
  return MemoryInfo{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

absl::Status CudaBackend::RunGraph(int64_t key, absl::FunctionRef<void()> enqueue) {
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    // Launch errors of the captured work come out of the ops; keep earlier ones separate.
    LOOM_RETURN_IF_ERROR(ops_->TakeError());
    LOOM_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    enqueue();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    absl::Status captured = ops_->TakeError();
    if (captured.ok()) captured = CudaStatus(end, "cudaStreamEndCapture", __FILE__, __LINE__);
    if (!captured.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return captured;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiate = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    LOOM_RETURN_IF_ERROR(CudaStatus(instantiate, "cudaGraphInstantiate", __FILE__, __LINE__));
    it = graphs_.emplace(key, exec).first;
  }
  LOOM_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream_));
  return absl::OkStatus();
}

}  // namespace loom
