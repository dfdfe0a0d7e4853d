// The ExpertProvider behind an expert cache: routed experts live in a slow tier and reach the
// forward pass through an ExpertStore (engine/experts/expert_store.h), which loads the ones a step
// needs on demand and the ones the scheduler hints ahead of need, into a bounded budget of fast
// memory. Get pins the expert (waiting for its load) and hands out its weights with the same
// dtype and shape as the checkpoint's, pointing into the store's slot; EndStep releases every pin
// of the step. Outputs are exactly those of the all-resident provider: the bytes are the same.
//
// Two pairs of tiers:
//   - Create (the CPU backend): the checkpoint's files and RAM. The CPU's ops are synchronous, so
//     Done unpins at once.
//   - CreateInHostMemory (a backend with device memory): a copy of the experts in host memory and
//     slots in device memory (engine/experts/device_tiers.h). The ops run asynchronously, so an
//     expert stays pinned after Done until the ops that read it are known to have finished: at
//     the next sparse layer's WillUse (Ops::MoeRoute has waited for every op queued before it,
//     see MoeRouteArgs::host_expert_offsets), at EndStep (which waits for the backend), or when a
//     Get finds every slot pinned (it waits for the backend, unpins, and tries again).
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
#include "engine/backend/backend.h"
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
  // `experts` as above (host views, e.g. into the checkpoint's mapping; no expert may have a
  // bias) are copied into host memory of `backend` (the slow tier), and a store of
  // `options.budget_bytes` of `backend`'s memory is opened over them. The views may go away
  // afterwards; `backend` must outlive the provider.
  static absl::StatusOr<std::unique_ptr<StoredExpertProvider>> CreateInHostMemory(
      std::span<const ExpertWeights> experts, int32_t num_experts, Backend& backend,
      const ExpertStoreOptions& options);

  // WillUse remembers the layer's experts; each Get pins its expert and preloads the layer's next
  // one, so reading it overlaps computing this one; Done unpins (at once, or later: see above).
  void WillUse(int32_t layer, std::span<const int32_t> experts) override;
  absl::StatusOr<const ExpertWeights*> Get(int32_t layer, int32_t expert) override;
  void Done(int32_t layer, int32_t expert) override;
  void EndStep() override;

  ExpertStore& store() { return *store_; }

 private:
  StoredExpertProvider(std::vector<ExpertWeights> shapes, int32_t num_experts,
                       std::unique_ptr<ExpertStore> store, Backend* async_backend);
  // Waits for `async_backend_` and unpins the experts Done left pinned.
  absl::Status ReleaseDone(bool wait);

  // The bound weights with their data pointers cleared: dtype, shape and bias per expert.
  std::vector<ExpertWeights> shapes_;
  int32_t num_experts_;
  std::unique_ptr<ExpertStore> store_;
  // This step's pins, and the weights handed out for them (pointers into the slots).
  std::vector<ExpertKey> pinned_;
  // A backend whose ops run asynchronously (CreateInHostMemory), and the experts Done has seen
  // whose ops may still be running, still pinned.
  Backend* async_backend_ = nullptr;
  std::vector<ExpertKey> done_;
  std::vector<std::unique_ptr<ExpertWeights>> handed_out_;
  // The current layer's experts (WillUse), in order.
  int32_t upcoming_layer_ = -1;
  std::vector<int32_t> upcoming_;
};

}  // namespace loom
