#include "engine/experts/stored_experts.h"

#include <algorithm>
#include <cstring>

#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/experts/device_tiers.h"

namespace loom {
namespace {

// The bytes of one of the checkpoint's files, as mapped.
struct MappedBytes {
  const uint8_t* base;
  int64_t num_bytes;
};

// Where `view`'s bytes lie in the checkpoint's files.
absl::StatusOr<ExpertPart> Locate(const WeightView& view, std::span<const MappedBytes> files,
                                  ExpertKey key) {
  const auto* data = static_cast<const uint8_t*>(view.data);
  const int64_t bytes = view.rows * DTypeRowBytes(view.dtype, view.cols);
  for (size_t f = 0; f < files.size(); ++f) {
    if (data >= files[f].base && data + bytes <= files[f].base + files[f].num_bytes) {
      return ExpertPart{static_cast<int32_t>(f), data - files[f].base, bytes};
    }
  }
  return absl::InternalError(StrCat("expert ", key.expert, " of layer ", key.layer,
                                    " is not in the checkpoint's files"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoredExpertProvider>> StoredExpertProvider::Create(
    std::span<const ExpertWeights> experts, int32_t num_experts, const Checkpoint& checkpoint,
    const ExpertStoreOptions& options) {
  std::vector<std::string> paths;
  std::vector<MappedBytes> mapped;
  if (const GgufFile* gguf = checkpoint.gguf()) {
    paths.push_back(gguf->path());
    mapped.push_back({static_cast<const uint8_t*>(gguf->mapping()), gguf->file_bytes()});
  }
  for (const auto& file : checkpoint.files()) {
    paths.push_back(file->path());
    mapped.push_back({static_cast<const uint8_t*>(file->mapping()), file->file_bytes()});
  }
  std::vector<ExpertLocation> locations;
  std::vector<ExpertWeights> shapes(experts.begin(), experts.end());
  for (size_t i = 0; i < experts.size(); ++i) {
    const ExpertWeights& w = experts[i];
    if (w.gate.weight.data == nullptr) continue;  // a dense layer
    const ExpertKey key{static_cast<int32_t>(i / static_cast<size_t>(num_experts)),
                        static_cast<int32_t>(i % static_cast<size_t>(num_experts))};
    ExpertLocation location{key, {}};
    for (const LinearWeight* m : {&w.gate, &w.up, &w.down}) {
      LOOM_ASSIGN_OR_RETURN(ExpertPart part, Locate(m->weight, mapped, key));
      location.parts.push_back(part);
    }
    locations.push_back(std::move(location));
    shapes[i].gate.weight.data = shapes[i].up.weight.data = shapes[i].down.weight.data = nullptr;
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store,
                        ExpertStore::Create(paths, std::move(locations), options));
  return std::unique_ptr<StoredExpertProvider>(
      new StoredExpertProvider(std::move(shapes), num_experts, std::move(store), nullptr));
}

absl::StatusOr<std::unique_ptr<StoredExpertProvider>> StoredExpertProvider::CreateInHostMemory(
    std::span<const ExpertWeights> experts, int32_t num_experts, Backend& backend,
    const ExpertStoreOptions& options) {
  constexpr int64_t kPage = 4096;
  // Each part at a page boundary of the home, so it keeps that alignment in a slot.
  std::vector<ExpertLocation> locations;
  std::vector<const void*> sources;
  std::vector<ExpertWeights> shapes(experts.begin(), experts.end());
  int64_t home_bytes = 0;
  for (size_t i = 0; i < experts.size(); ++i) {
    const ExpertWeights& w = experts[i];
    if (w.gate.weight.data == nullptr) continue;  // a dense layer
    const ExpertKey key{static_cast<int32_t>(i / static_cast<size_t>(num_experts)),
                        static_cast<int32_t>(i % static_cast<size_t>(num_experts))};
    ExpertLocation location{key, {}};
    for (const LinearWeight* m : {&w.gate, &w.up, &w.down}) {
      if (m->bias != nullptr) {
        return absl::UnimplementedError(
            "an expert cache in device memory does not hold experts with biases");
      }
      const int64_t bytes = m->weight.rows * DTypeRowBytes(m->weight.dtype, m->weight.cols);
      location.parts.push_back({0, home_bytes, bytes});
      sources.push_back(m->weight.data);
      home_bytes += (bytes + kPage - 1) / kPage * kPage;
    }
    locations.push_back(std::move(location));
    shapes[i].gate.weight.data = shapes[i].up.weight.data = shapes[i].down.weight.data = nullptr;
  }
  absl::StatusOr<HostMemory> home = backend.AllocateHost(home_bytes);
  if (!home.ok()) {
    return absl::ResourceExhaustedError(StrCat("the experts' host copy (", home_bytes >> 20,
                                               " MiB): ", home.status().message()));
  }
  size_t source = 0;
  for (const ExpertLocation& location : locations) {
    for (const ExpertPart& part : location.parts) {
      std::memcpy(home->get() + part.offset, sources[source++], static_cast<size_t>(part.bytes));
    }
  }
  HostMemory memory = std::move(*home);
  LOOM_ASSIGN_OR_RETURN(
      std::unique_ptr<ExpertStore> store,
      ExpertStore::CreateWithTiers(
          {"the experts' host copy"}, {home_bytes}, std::move(locations), options,
          [&](int64_t slot_bytes, int32_t num_slots)
              -> absl::StatusOr<std::unique_ptr<ExpertTiers>> {
            LOOM_ASSIGN_OR_RETURN(
                std::unique_ptr<DeviceTiers> tiers,
                DeviceTiers::Create(backend, std::move(memory), slot_bytes, num_slots));
            return std::unique_ptr<ExpertTiers>(std::move(tiers));
          }));
  return std::unique_ptr<StoredExpertProvider>(
      new StoredExpertProvider(std::move(shapes), num_experts, std::move(store), &backend));
}

StoredExpertProvider::StoredExpertProvider(std::vector<ExpertWeights> shapes, int32_t num_experts,
                                           std::unique_ptr<ExpertStore> store,
                                           Backend* async_backend)
    : shapes_(std::move(shapes)),
      num_experts_(num_experts),
      store_(std::move(store)),
      async_backend_(async_backend) {}

absl::Status StoredExpertProvider::ReleaseDone(bool wait) {
  absl::Status status;
  if (wait && async_backend_ != nullptr && !done_.empty()) status = async_backend_->Synchronize();
  for (ExpertKey key : done_) store_->Release(key);
  done_.clear();
  return status;
}

void StoredExpertProvider::WillUse(int32_t layer, std::span<const int32_t> experts) {
  // Ops::MoeRoute, just before, waited for every op queued before it: the earlier layers'
  // experts are no longer read.
  if (async_backend_ != nullptr) (void)ReleaseDone(/*wait=*/false);
  upcoming_layer_ = layer;
  upcoming_.assign(experts.begin(), experts.end());
}

absl::StatusOr<const ExpertWeights*> StoredExpertProvider::Get(int32_t layer, int32_t expert) {
  const int64_t index = int64_t{layer} * num_experts_ + expert;
  LOOM_CHECK(expert >= 0 && expert < num_experts_ && index >= 0 &&
                 index < static_cast<int64_t>(shapes_.size()),
             "expert ", expert, " of layer ", layer, " out of range");
  const ExpertKey key{layer, expert};
  absl::StatusOr<ExpertBytes> acquired = store_->Acquire(key);
  if (absl::IsResourceExhausted(acquired.status()) && !done_.empty()) {
    // Every slot is pinned, some by experts whose ops are queued: wait for those, then retry.
    LOOM_RETURN_IF_ERROR(ReleaseDone(/*wait=*/true));
    acquired = store_->Acquire(key);
  }
  if (!acquired.ok()) return acquired.status();
  const ExpertBytes& bytes = *acquired;
  pinned_.push_back(key);
  if (layer == upcoming_layer_) {
    auto next = std::find(upcoming_.begin(), upcoming_.end(), expert);
    if (next != upcoming_.end() && ++next != upcoming_.end()) store_->Preload({layer, *next});
  }
  auto weights = std::make_unique<ExpertWeights>(shapes_[static_cast<size_t>(index)]);
  weights->gate.weight.data = bytes.data + bytes.part_offsets[0];
  weights->up.weight.data = bytes.data + bytes.part_offsets[1];
  weights->down.weight.data = bytes.data + bytes.part_offsets[2];
  handed_out_.push_back(std::move(weights));
  return handed_out_.back().get();
}

void StoredExpertProvider::Done(int32_t layer, int32_t expert) {
  const ExpertKey key{layer, expert};
  auto it = std::find(pinned_.begin(), pinned_.end(), key);
  if (it == pinned_.end()) return;
  if (async_backend_ != nullptr) {
    done_.push_back(key);
  } else {
    store_->Release(key);
  }
  pinned_.erase(it);
}

void StoredExpertProvider::EndStep() {
  upcoming_layer_ = -1;
  upcoming_.clear();
  // Experts Get handed out whose Done never came (a failed step) are released with the rest.
  done_.insert(done_.end(), pinned_.begin(), pinned_.end());
  pinned_.clear();
  // A failure of the wait is the device's; the executor's own wait reports it.
  (void)ReleaseDone(/*wait=*/true);
  handed_out_.clear();
}

}  // namespace loom
