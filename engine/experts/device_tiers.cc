#include "engine/experts/device_tiers.h"

#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {

absl::StatusOr<std::unique_ptr<DeviceTiers>> DeviceTiers::Create(Backend& backend,
                                                                 HostMemory home,
                                                                 int64_t slot_bytes,
                                                                 int32_t num_slots) {
  absl::StatusOr<DeviceBuffer> slots = backend.Allocate(slot_bytes * num_slots);
  if (!slots.ok()) {
    return absl::ResourceExhaustedError(StrCat("expert cache: ", num_slots, " slots of ",
                                               slot_bytes, " bytes: ", slots.status().message()));
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<CopyQueue> queue, backend.CreateCopyQueue());
  return std::unique_ptr<DeviceTiers>(
      new DeviceTiers(std::move(home), std::move(*slots), std::move(queue)));
}

absl::Status DeviceTiers::Load(const ExpertLocation& location,
                               std::span<const int64_t> part_offsets, uint8_t* slot) {
  for (size_t i = 0; i < location.parts.size(); ++i) {
    const ExpertPart& part = location.parts[i];
    absl::Status copied =
        queue_->CopyToDevice(slot + part_offsets[i], home_.get() + part.offset, part.bytes);
    if (!copied.ok()) {
      return absl::Status(copied.code(),
                          StrCat("loading expert ", location.key.expert, " of layer ",
                                 location.key.layer, ": ", copied.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
