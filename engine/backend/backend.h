// A device the engine runs on: its memory, its ops, and how to wait for it.
//
// The CPU backend is always built; the CUDA backend exists when loom is configured with
// LOOM_CUDA. `CreateBackend` (engine/backend/registry.cc) is the only place that knows which
// backends were compiled in. Thread safety: one thread (the engine loop) drives a backend.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "engine/backend/ops.h"

namespace loom {

class Backend;

// Device memory owned by a backend, released when the buffer is destroyed.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* owner, void* data, int64_t bytes) : owner_(owner), data_(data), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  void Reset();

 private:
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// Host memory from Backend::AllocateHost, released with the backend's own call (page-locked
// memory on CUDA, so that a CopyQueue reads it at the bus's full speed).
struct HostMemoryRelease {
  void (*release)(void*) = nullptr;
  void operator()(uint8_t* data) const {
    if (data != nullptr && release != nullptr) release(data);
  }
};
using HostMemory = std::unique_ptr<uint8_t[], HostMemoryRelease>;

// Host-to-device copies beside the ops' queue (CUDA: a stream of its own), for a thread other than
// the engine loop, e.g. an expert loader. CopyToDevice returns once the bytes are in device
// memory. It neither waits for the ops nor is ordered with them: the caller makes sure that no op
// queued or running reads or writes `device_dst` meanwhile. One thread uses a queue.
class CopyQueue {
 public:
  virtual ~CopyQueue() = default;
  virtual absl::Status CopyToDevice(void* device_dst, const void* host_src, int64_t bytes) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Ops& ops() = 0;
  // 64-byte aligned device memory; ResourceExhausted when it is not there.
  virtual absl::StatusOr<DeviceBuffer> Allocate(int64_t bytes) = 0;
  virtual void Free(void* data, int64_t bytes) = 0;
  // Copies between host memory and this backend's memory (plain memcpy on the CPU).
  virtual void CopyToDevice(void* device_dst, const void* host_src, int64_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* device_src, int64_t bytes) = 0;
  // Copies within this backend's memory (queued in order with the ops; a memcpy on the CPU).
  virtual void CopyWithinDevice(void* device_dst, const void* device_src, int64_t bytes) = 0;
  // Queues a copy into host memory after the work queued so far (into AllocateHost's memory, for
  // it to run while the host goes on); WaitForHostCopies waits until every one queued has landed.
  virtual void CopyToHostAsync(void* host_dst, const void* device_src, int64_t bytes) = 0;
  virtual absl::Status WaitForHostCopies() = 0;
  // Host memory that CopyQueue copies from, at least 64-byte aligned (ResourceExhausted when it
  // is not there).
  virtual absl::StatusOr<HostMemory> AllocateHost(int64_t bytes) = 0;
  // A copy queue for one other thread.
  virtual absl::StatusOr<std::unique_ptr<CopyQueue>> CreateCopyQueue() = 0;
  // Waits until all work issued so far has finished; reports a device failure (marked with
  // MarkFatalDeviceError, engine/api/executor.h, when the device cannot recover).
  virtual absl::Status Synchronize() = 0;

  // True when the backend's memory is host memory the CPU may address directly (the CPU
  // backend); false for device memory, reachable only through the copies above.
  virtual bool host_memory() const = 0;

  // Device memory as the driver reports it; nullopt for host memory.
  struct MemoryInfo {
    int64_t free_bytes = 0;
    int64_t total_bytes = 0;
  };
  virtual std::optional<MemoryInfo> DeviceMemory() { return std::nullopt; }

  // Makes this backend's device current on the calling thread (the engine loop calls it at the
  // start of every step; a no-op where there is no per-thread device state).
  virtual void BindThread() {}

  // Whether RunGraph replays captured work (CUDA graphs) rather than running it directly.
  virtual bool supports_graphs() const { return false; }
  // Runs `enqueue`, which queues device work on this backend through ops() and the copies
  // above. A backend with graphs captures that work the first time it sees `key` and replays
  // the capture on later calls with the same key, so the caller must guarantee that `enqueue`
  // issues identical work (same pointers, sizes and host arguments) for equal keys; only the
  // contents of device memory may differ. Errors are those of capture and launch; the work's
  // own errors surface from Synchronize.
  virtual absl::Status RunGraph(int64_t key, absl::FunctionRef<void()> enqueue) {
    (void)key;
    enqueue();
    return absl::OkStatus();
  }
};

enum class BackendKind { kCpu, kCuda };

struct BackendOptions {
  BackendKind kind = BackendKind::kCpu;
  // CPU: worker threads (0: one per available core).
  int num_threads = 0;
  // CPU: whether prefill matmuls may round activations to bf16 once (faster, ~3 significant
  // digits) instead of the default f32 accuracy (on AMX: activations split into three bf16
  // parts).
  bool fast_bf16_matmul = false;
  // CPU: whether the GEMV of block-quantized weights (decode) quantizes activations to int8
  // (cpu::QuantActivations::kInt8) instead of keeping them f32.
  bool int8_activations = false;
  // CUDA: the device ordinal.
  int device = 0;
  // CPU, for tests: report graph support (RunGraph still runs the work directly), so that the
  // executor's padded decode batches (the shape of CUDA graph replays) run, and are checked,
  // on machines without a GPU.
  bool pretend_graphs = false;
};

// Creates the backend `options.kind`; Unimplemented when it was not compiled in.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

absl::StatusOr<BackendKind> ParseBackendKind(std::string_view name);

}  // namespace loom
