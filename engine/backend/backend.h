// A device the engine runs on: its memory, its ops, and how to wait for it.
//
// The CPU backend is always built; the CUDA backend exists when loom is configured with
// LOOM_CUDA. `CreateBackend` (engine/backend/registry.cc) is the only place that knows which
// backends were compiled in. Thread safety: one thread (the engine loop) drives a backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

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
  // Waits until all work issued so far has finished; reports a device failure.
  virtual absl::Status Synchronize() = 0;
};

enum class BackendKind { kCpu, kCuda };

struct BackendOptions {
  BackendKind kind = BackendKind::kCpu;
  // CPU: worker threads (0: one per available core).
  int num_threads = 0;
  // CPU: whether prefill matmuls may round activations to bf16 once (faster, ~3 significant
  // digits) instead of the default split-bf16 scheme that matches f32 to ~1e-5.
  bool fast_bf16_matmul = false;
};

// Creates the backend `options.kind`; Unimplemented when it was not compiled in.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

absl::StatusOr<BackendKind> ParseBackendKind(std::string_view name);

}  // namespace loom
