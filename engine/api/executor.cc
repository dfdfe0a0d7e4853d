#include "engine/api/executor.h"

#include "absl/strings/cord.h"

namespace loom {
namespace {

constexpr char kFatalDevicePayload[] = "loom.dev/fatal-device-error";

}  // namespace

absl::Status MarkFatalDeviceError(absl::Status status) {
  if (!status.ok()) status.SetPayload(kFatalDevicePayload, absl::Cord("1"));
  return status;
}

bool IsFatalDeviceError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kFatalDevicePayload).has_value();
}

}  // namespace loom
