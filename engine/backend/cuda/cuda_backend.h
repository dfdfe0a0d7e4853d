// The CUDA backend: one device, one stream, one cuBLAS handle, CudaOps, and CUDA graphs.
//
// Everything the engine queues (copies, ops, graph launches) goes in order onto the one stream,
// so the only waits are CopyToHost (the logits) and Synchronize. Allocate is cudaMalloc plus a
// zero fill: the engine allocates everything at start-up (weights, activations, KV pool,
// workspace), never on the step path.
//
// Graphs. RunGraph(key, enqueue) captures `enqueue`'s work on the stream the first time `key`
// is seen (thread-local capture mode), instantiates it and from then on replays the executable
// graph: a decode step of 32 layers is ~400 launches, which replay as one. The executor keys
// decode steps by their padded batch size (engine/runtime/local_executor.cc).
//
// Errors: see engine/backend/cuda/cuda_status.h. A sticky device error is reported, marked
// fatal, from Synchronize.
//
// Thread safety: one thread drives it; BindThread makes the device current on the calling
// thread (the engine loop is not the thread that created the backend).
#pragma once

#include <memory>
#include <optional>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_ops.h"

namespace loom {

class CudaBackend final : public Backend {
 public:
  // FailedPrecondition when the runtime sees no device (no driver, no GPU); the device's own
  // errors otherwise.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const BackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  Ops& ops() override { return *ops_; }
  absl::StatusOr<DeviceBuffer> Allocate(int64_t bytes) override;
  void Free(void* data, int64_t bytes) override;
  void CopyToDevice(void* device_dst, const void* host_src, int64_t bytes) override;
  void CopyToHost(void* host_dst, const void* device_src, int64_t bytes) override;
  void CopyWithinDevice(void* device_dst, const void* device_src, int64_t bytes) override;
  // cudaMemcpyAsync on the stream, then an event; the wait is on the event, not the stream.
  void CopyToHostAsync(void* host_dst, const void* device_src, int64_t bytes) override;
  absl::Status WaitForHostCopies() override;
  // Page-locked (cudaHostAlloc), so that copies from it run at the bus's speed.
  absl::StatusOr<HostMemory> AllocateHost(int64_t bytes) override;
  // A stream of its own (non-blocking, so it does not wait for the ops' stream either).
  absl::StatusOr<std::unique_ptr<CopyQueue>> CreateCopyQueue() override;
  absl::Status Synchronize() override;
  bool host_memory() const override { return false; }
  std::optional<MemoryInfo> DeviceMemory() override;
  bool supports_graphs() const override { return true; }
  absl::Status RunGraph(int64_t key, absl::FunctionRef<void()> enqueue) override;
  void BindThread() override;

  cudaStream_t stream() const { return stream_; }
  int num_graphs() const { return static_cast<int>(graphs_.size()); }

 private:
  CudaBackend() = default;

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t host_copies_ = nullptr;  // recorded after each CopyToHostAsync
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<CudaOps> ops_;
  absl::flat_hash_map<int64_t, cudaGraphExec_t> graphs_;
};

}  // namespace loom
