// The ExpertProvider behind an expert cache: routed experts live in the checkpoint's files and
// reach the forward pass through an ExpertStore (engine/experts/expert_store.h), which loads the
// ones a step needs on demand and the ones the scheduler hints ahead of need, into a bounded RAM
// budget. Get pins the expert (waiting for its load) and hands out its weights with the same
// dtype and shape as the checkpoint's, pointing into the store's slot; EndStep releases every pin
// of the step. Outputs are exactly those of the all-resident provider: the bytes are the same.
//
// Thread safety: the engine loop's thread calls Get/EndStep; the store is shared with the
// executor, which passes the plan's scores and hints to it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/experts/expert_provider.h"
#include "engine/experts/expert_store.h"
#include "engine/weights/checkpoint.h"

namespace loom {

class StoredExpertProvider final : public ExpertProvider {
 public:
  // `experts`: [num_layers * num_experts] as bound by the loader (views into `checkpoint`'s
  // mapping; entries of dense layers empty). Finds each expert's three matrices in the
  // checkpoint's files (safetensors shards, or the GGUF file, where an expert is whole rows of
  // the layer's stacked tensors) and opens a store of `options.budget_bytes` over them. The
  // checkpoint may be closed afterwards.
  static absl::StatusOr<std::unique_ptr<StoredExpertProvider>> Create(
      std::span<const ExpertWeights> experts, int32_t num_experts, const Checkpoint& checkpoint,
      const ExpertStoreOptions& options);

  // WillUse remembers the layer's experts; each Get pins its expert and preloads the layer's next
  // one, so reading it overlaps computing this one; Done unpins at once (the CPU backend's ops are
  // synchronous: this provider runs only there).
  void WillUse(int32_t layer, std::span<const int32_t> experts) override;
  absl::StatusOr<const ExpertWeights*> Get(int32_t layer, int32_t expert) override;
  void Done(int32_t layer, int32_t expert) override;
  void EndStep() override;

  ExpertStore& store() { return *store_; }

 private:
  StoredExpertProvider(std::vector<ExpertWeights> shapes, int32_t num_experts,
                       std::unique_ptr<ExpertStore> store);

  // The bound weights with their data pointers cleared: dtype, shape and bias per expert.
  std::vector<ExpertWeights> shapes_;
  int32_t num_experts_;
  std::unique_ptr<ExpertStore> store_;
  // This step's pins, and the weights handed out for them (pointers into the slots).
  std::vector<ExpertKey> pinned_;
  std::vector<std::unique_ptr<ExpertWeights>> handed_out_;
  // The current layer's experts (WillUse), in order.
  int32_t upcoming_layer_ = -1;
  std::vector<int32_t> upcoming_;
};

}  // namespace loom
