// Expert tiers for a backend with its own memory (engine/backend/backend.h): each routed
// expert's home is a copy in host memory (Backend::AllocateHost: page-locked on CUDA), the slots
// are one allocation of the backend's memory, and a load is a copy on the backend's CopyQueue
// (CUDA: a stream of its own, so loads overlap the ops). The store's loader thread is the one
// thread that uses the queue.
//
// On the CPU backend the same tiers are RAM and RAM; they exist there so that this path runs in
// the CPU tests (EngineConfig::expert_home_in_memory).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/experts/expert_store.h"

namespace loom {

class DeviceTiers final : public ExpertTiers {
 public:
  // `home` holds every expert's parts, at the offsets their ExpertLocations name (home 0).
  static absl::StatusOr<std::unique_ptr<DeviceTiers>> Create(Backend& backend, HostMemory home,
                                                             int64_t slot_bytes,
                                                             int32_t num_slots);

  uint8_t* slots() const override { return slots_.as<uint8_t>(); }
  absl::Status Load(const ExpertLocation& location, std::span<const int64_t> part_offsets,
                    uint8_t* slot) override;

 private:
  DeviceTiers(HostMemory home, DeviceBuffer slots, std::unique_ptr<CopyQueue> queue)
      : home_(std::move(home)), slots_(std::move(slots)), queue_(std::move(queue)) {}

  HostMemory home_;
  DeviceBuffer slots_;
  std::unique_ptr<CopyQueue> queue_;
};

}  // namespace loom
