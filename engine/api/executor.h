// The only call from the scheduler into the engine (shared/ARCHITECTURE.md §3).
//
// Thread safety: an Executor is driven by one thread, the engine loop. `model_info` and
// `capacity` are immutable after construction and may be read from any thread.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/api/model_info.h"
#include "engine/api/step.h"

namespace loom {

class Executor {
 public:
  virtual ~Executor() = default;

  // Runs one step. An error describes a plan that breaks the contract (unknown sequence, block
  // out of range, more tokens than known) or a device failure; the engine state of the
  // sequences in a rejected plan is unchanged.
  virtual absl::StatusOr<StepResult> Execute(const StepPlan& plan) = 0;

  virtual const ModelInfo& model_info() const = 0;
  virtual const KvCapacity& capacity() const = 0;
};

// A device failure the process cannot recover from (a sticky CUDA error: the device context is
// lost, and every later call fails too). Execute returns it marked; the engine loop then fails
// every request, not only the step's, and stops so that the supervisor restarts the process.
absl::Status MarkFatalDeviceError(absl::Status status);
bool IsFatalDeviceError(const absl::Status& status);

}  // namespace loom
