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
//     This provider can also compute an expert where it lives (HybriMoE; llama.cpp's
//     --n-cpu-moe): PrefersHost says yes for an expert neither resident nor on its way when
//     computing its rows on the host CPU from the host copy beats loading it
//     (HostComputeCost, measured when the cache opens: the copy queue's rate, and the host's
//     time for one and for several rows of an expert), or always, or never
//     (ExpertHostCompute).
//
//     Unless that mode is kNever, it also keeps a table per sparse layer for the grouped experts
//     (ExpertProvider::GroupedTable): a step of few tokens then reads every resident expert from
//     its slot and every other one in place from the host copy (on CUDA the kernels read the
//     page-locked copy over the bus), routes on the device and waits for nothing, so it can be
//     a graph; the experts it read at home are loaded after it, for the next steps.
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

// Computing an expert on the host against loading it, for one step (future reuse of a loaded
// expert is the prefetch policy's business, not this model's).
struct HostComputeCost {
  double load_bytes_per_second = 0;  // the copy queue's rate
  double host_seconds_base = 0;      // host time for r rows: base + per_row * r
  double host_seconds_per_row = 0;
  // True when `rows` rows on the host, their activations copied to the host and back
  // (`row_bytes` each way per row), take less time than loading `expert_bytes`.
  bool HostIsFaster(int32_t rows, int64_t expert_bytes, int64_t row_bytes) const;
};

// What CreateInHostMemory needs to compute experts on the host.
struct HostComputeOptions {
  ExpertHostCompute mode = ExpertHostCompute::kNever;
  Ops* ops = nullptr;     // the host CPU's ops (a CPU backend's); nullptr: no host compute
  int32_t max_rows = 0;          // most rows one layer computes on the host (tokens x top_k)
  int32_t max_expert_rows = 0;   // most rows of one expert (a step's tokens)
  // Keep grouped tables (unless the mode is kNever): EngineConfig::moe_grouped_experts.
  bool grouped_tables = true;
};

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
  // With host compute (`host.ops` set and a mode other than kNever) it also measures the costs
  // (kAuto) and allocates host rows for RunOnHost; `host.ops` must outlive the provider.
  static absl::StatusOr<std::unique_ptr<StoredExpertProvider>> CreateInHostMemory(
      std::span<const ExpertWeights> experts, int32_t num_experts, Backend& backend,
      const ExpertStoreOptions& options, const HostComputeOptions& host = {});

  // WillUse remembers the layer's experts; each Get pins its expert and preloads the layer's next
  // one, so reading it overlaps computing this one; Done unpins (at once, or later: see above).
  void WillUse(int32_t layer, std::span<const int32_t> experts) override;
  absl::StatusOr<const ExpertWeights*> Get(int32_t layer, int32_t expert) override;
  void Done(int32_t layer, int32_t expert) override;
  void EndStep() override;
  bool PrefersHost(int32_t layer, int32_t expert, int32_t rows) override;
  const ExpertTable* GroupedTable(int32_t layer) const override;
  absl::Status BeginGroupedStep() override;
  void GroupedRouting(int32_t layer, std::span<const int32_t> expert_ids) override;
  HostRows host_rows() override { return {host_x_, host_out_}; }
  absl::Status RunOnHost(int32_t layer, int32_t expert, int32_t first, int32_t rows) override;

  const HostComputeCost& host_cost() const { return cost_; }

  ExpertStore& store() { return *store_; }

 private:
  StoredExpertProvider(std::vector<ExpertWeights> shapes, int32_t num_experts,
                       std::unique_ptr<ExpertStore> store, Backend* async_backend);
  // Waits for `async_backend_` and unpins the experts Done left pinned.
  absl::Status ReleaseDone(bool wait);
  // The grouped experts' tables, one per sparse layer, over `backend`'s ops.
  absl::Status SetUpGroupedTables(Backend& backend);
  // Host compute: buffers, and the costs (kAuto).
  absl::Status SetUpHostCompute(Backend& backend, const HostComputeOptions& host);
  absl::Status MeasureHostCompute();
  // host_out_[first, first + rows) = w's MLP of host_x_[first, first + rows), on the host's ops.
  absl::Status Compute(const ExpertWeights& w, int32_t first, int32_t rows);
  // The index of an expert in shapes_ / host_weights_ (checked).
  int64_t Index(int32_t layer, int32_t expert) const;

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
  // Grouped experts (CreateInHostMemory, host compute not kNever): per layer its table (null for
  // dense layers); per expert whether this step reads it from its slot; the experts this step
  // read at home (loaded at EndStep), each once.
  Ops* grouped_ops_ = nullptr;
  std::vector<std::unique_ptr<ExpertTable>> tables_;
  std::vector<uint8_t> from_slot_;
  std::vector<uint8_t> read_at_home_;
  std::vector<ExpertKey> to_load_;
  // Host compute (CreateInHostMemory): the experts' views into the host copy, the host's ops,
  // its buffers and the cost model.
  std::vector<ExpertWeights> host_weights_;
  ExpertHostCompute host_mode_ = ExpertHostCompute::kNever;
  Ops* host_ops_ = nullptr;
  int32_t host_max_rows_ = 0, host_max_expert_rows_ = 0;
  HostMemory host_x_memory_, host_out_memory_;
  float* host_x_ = nullptr;
  float* host_out_ = nullptr;
  std::vector<float> host_gate_, host_up_;
  HostComputeCost cost_;
  std::vector<std::unique_ptr<ExpertWeights>> handed_out_;
  // The current layer's experts (WillUse), in order.
  int32_t upcoming_layer_ = -1;
  std::vector<int32_t> upcoming_;
};

}  // namespace loom
