#include "engine/experts/stored_experts.h"

#include <algorithm>

#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

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
      new StoredExpertProvider(std::move(shapes), num_experts, std::move(store)));
}

StoredExpertProvider::StoredExpertProvider(std::vector<ExpertWeights> shapes, int32_t num_experts,
                                           std::unique_ptr<ExpertStore> store)
    : shapes_(std::move(shapes)), num_experts_(num_experts), store_(std::move(store)) {}

void StoredExpertProvider::WillUse(int32_t layer, std::span<const int32_t> experts) {
  upcoming_layer_ = layer;
  upcoming_.assign(experts.begin(), experts.end());
}

absl::StatusOr<const ExpertWeights*> StoredExpertProvider::Get(int32_t layer, int32_t expert) {
  const int64_t index = int64_t{layer} * num_experts_ + expert;
  LOOM_CHECK(expert >= 0 && expert < num_experts_ && index >= 0 &&
                 index < static_cast<int64_t>(shapes_.size()),
             "expert ", expert, " of layer ", layer, " out of range");
  const ExpertKey key{layer, expert};
  LOOM_ASSIGN_OR_RETURN(ExpertBytes bytes, store_->Acquire(key));
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
  store_->Release(key);
  pinned_.erase(it);
}

void StoredExpertProvider::EndStep() {
  upcoming_layer_ = -1;
  upcoming_.clear();
  for (ExpertKey key : pinned_) store_->Release(key);
  pinned_.clear();
  handed_out_.clear();
}

}  // namespace loom
