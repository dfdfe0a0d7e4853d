// The one place that knows which backends this build has (shared/ARCHITECTURE.md §4).
#include "engine/backend/backend.h"
#include "engine/backend/cpu_backend.h"
#include "engine/common/strings.h"

#if LOOM_HAS_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace loom {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = other.owner_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.owner_ = nullptr;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (owner_ != nullptr && data_ != nullptr) owner_->Free(data_, bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  switch (options.kind) {
    case BackendKind::kCpu:
      return std::unique_ptr<Backend>(new CpuBackend(options));
    case BackendKind::kCuda:
#if LOOM_HAS_CUDA
    {
      absl::StatusOr<std::unique_ptr<CudaBackend>> cuda = CudaBackend::Create(options);
      if (!cuda.ok()) return cuda.status();
      return std::unique_ptr<Backend>(std::move(*cuda));
    }
#else
      return absl::UnimplementedError(
          "this build of loom has no CUDA backend (configure with -DLOOM_CUDA=ON)");
#endif
  }
  return absl::InvalidArgumentError("unknown backend");
}

absl::StatusOr<BackendKind> ParseBackendKind(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(StrCat("unknown backend '", name, "' (cpu or cuda)"));
}

}  // namespace loom
