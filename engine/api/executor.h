// The only call from the scheduler into the engine (shared/ARCHITECTURE.md §3).
//
// Thread safety: an Executor is driven by one thread, the engine loop. `model_info` and
// `capacity` are immutable after construction and may be read from any thread.
#pragma once

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/api/model_info.h"
#include "engine/api/step.h"

namespace loom {

class Executor {
 public:
  virtual ~Executor() = default;

  // Runs one step, all or nothing (shared/ARCHITECTURE.md §3). One of:
  //   - OK: the plan ran; the engine state advanced and the result carries plan.step_id.
  //   - an unmarked error: the plan did not run and the engine state is exactly as before (a
  //     plan that breaks the contract, or a device failure caught before any state changed).
  //     Its releases are still to be done; its new sequences are unknown to the engine.
  //   - an error marked with MarkStepApplied: the engine state changed before the failure. The
  //     plan's releases and block copies are done, and every sequence of the plan is held by the
  //     engine until a later plan names it in `finished`; the sequences the failure touched
  //     (listed in the mark) have lost their state and their requests must end. The plan must
  //     never be sent again.
  //   - an error marked with MarkFatalDeviceError: the device is gone (see below).
  virtual absl::StatusOr<StepResult> Execute(const StepPlan& plan) = 0;

  virtual const ModelInfo& model_info() const = 0;
  virtual const KvCapacity& capacity() const = 0;
};

// A device failure the process cannot recover from (a sticky CUDA error: the device context is
// lost, and every later call fails too). Execute returns it marked; the engine loop then fails
// every request, not only the step's, and stops so that the supervisor restarts the process.
absl::Status MarkFatalDeviceError(absl::Status status);
bool IsFatalDeviceError(const absl::Status& status);

// Marks a step failure that happened after the engine state changed, naming the sequences of
// the plan whose state the failure touched (see Execute). OK stays OK.
absl::Status MarkStepApplied(absl::Status status, std::span<const SequenceId> touched);
// The touched sequences of an error marked with MarkStepApplied; nullopt for any other status
// (OK, or an error that left the engine state unchanged).
std::optional<std::vector<SequenceId>> StepAppliedTouched(const absl::Status& status);

}  // namespace loom
