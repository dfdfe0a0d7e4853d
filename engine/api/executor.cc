#include "engine/api/executor.h"

#include <string>

#include "absl/strings/cord.h"

namespace loom {
namespace {

constexpr char kFatalDevicePayload[] = "loom.dev/fatal-device-error";
// Comma-separated decimal sequence ids (possibly none) of the sequences a failure touched.
constexpr char kStepAppliedPayload[] = "loom.dev/step-applied";

}  // namespace

absl::Status MarkFatalDeviceError(absl::Status status) {
  if (!status.ok()) status.SetPayload(kFatalDevicePayload, absl::Cord("1"));
  return status;
}

bool IsFatalDeviceError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kFatalDevicePayload).has_value();
}

absl::Status MarkStepApplied(absl::Status status, std::span<const SequenceId> touched) {
  if (status.ok()) return status;
  std::string ids;
  for (SequenceId id : touched) {
    if (!ids.empty()) ids += ',';
    ids += std::to_string(id.value());
  }
  status.SetPayload(kStepAppliedPayload, absl::Cord(ids));
  return status;
}

std::optional<std::vector<SequenceId>> StepAppliedTouched(const absl::Status& status) {
  if (status.ok()) return std::nullopt;
  const auto payload = status.GetPayload(kStepAppliedPayload);
  if (!payload.has_value()) return std::nullopt;
  std::vector<SequenceId> touched;
  uint64_t id = 0;
  bool in_number = false;
  for (const char c : std::string(*payload)) {
    if (c >= '0' && c <= '9') {
      id = id * 10 + static_cast<uint64_t>(c - '0');
      in_number = true;
    } else if (in_number) {
      touched.push_back(SequenceId(id));
      id = 0;
      in_number = false;
    }
  }
  if (in_number) touched.push_back(SequenceId(id));
  return touched;
}

}  // namespace loom
