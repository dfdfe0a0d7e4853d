// The one way the forward pass reaches an expert's weights (shared/ARCHITECTURE.md §4 "Expert
// store"). A sparse layer asks the provider for each expert the step routes tokens to, computes
// with the returned weights, and tells it when the step's forward pass is over.
//
// Today's implementation keeps every expert resident (ResidentExpertProvider: views into the
// checkpoint's mapping). The expert store (residency tiers, asynchronous loads, a bounded cache)
// implements the same interface, so the layers do not change when it lands:
//   - Get may block until the expert is loaded, or fail (a read error): the step then fails as
//     a whole (engine/api/executor.h, all or nothing).
//   - What Get returns stays valid, and the expert may not be evicted, until Done (for that
//     expert) or EndStep.
//   - Which experts a step uses is reported to the scheduler by the routing counts
//     (StepResult), not through this interface; prefetch hints will come through the plan.
//
// Thread safety: called by the engine loop's thread only.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "engine/backend/ops.h"

namespace loom {

// Whether a device backend's expert cache may compute a missing expert's tokens on the host CPU,
// where the expert lives, instead of loading it (EngineConfig::expert_host_compute).
enum class ExpertHostCompute {
  kAuto,    // when the measured cost model says it is faster than the load
  kNever,   // always load
  kAlways,  // every expert not resident (or arriving) is computed on the host
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;

  // Host buffers for RunOnHost, [max rows, hidden] f32 each (max rows: a step's tokens times
  // top_k); null when the provider computes nothing on the host.
  struct HostRows {
    float* x = nullptr;
    float* out = nullptr;
  };

  // The weights of expert `expert` of sparse layer `layer` (model layer index), usable by the
  // backend's ops until EndStep. Callers pass only valid indices (a sparse layer, an expert below
  // num_experts).
  virtual absl::StatusOr<const ExpertWeights*> Get(int32_t layer, int32_t expert) = 0;

  // Sparse layer `layer` is about to Get `experts`, in this order (the experts its tokens were
  // routed to). A provider with a cache may start loading them.
  virtual void WillUse(int32_t layer, std::span<const int32_t> experts) {
    (void)layer;
    (void)experts;
  }

  // The layer is done with the expert: every op that reads it has been queued. A provider may
  // reuse its memory once that work has completed (at once on a backend whose ops run
  // synchronously, the CPU's; after the backend's next synchronization otherwise).
  virtual void Done(int32_t layer, int32_t expert) {
    (void)layer;
    (void)expert;
  }

  // The step's forward pass is over (or failed): what Get returned may now go away.
  virtual void EndStep() {}

  // Grouped experts behind a cache (Ops::MoeGroupedExperts). A provider that keeps a table per
  // sparse layer returns it here (null: the layer's steps go expert by expert through Get). Before
  // a step that uses the tables, and outside any graph, BeginGroupedStep points each at this
  // step's experts: a resident expert's slot (pinned until EndStep), else its home, which the
  // kernels then read in place. After the forward pass, before EndStep, GroupedRouting reports
  // the experts each sparse layer routed its tokens to ([tokens, top_k], host memory): the
  // provider counts them and loads the ones read at home, for the steps to come.
  virtual const ExpertTable* GroupedTable(int32_t layer) const {
    (void)layer;
    return nullptr;
  }
  virtual absl::Status BeginGroupedStep() { return absl::OkStatus(); }
  virtual void GroupedRouting(int32_t layer, std::span<const int32_t> expert_ids) {
    (void)layer;
    (void)expert_ids;
  }

  // Computing where the expert lives. Called before WillUse for each expert the layer's tokens
  // were routed to: true when `rows` tokens of the expert are better computed on the host CPU,
  // where its weights live, than brought into the backend's memory (an expert cache whose slow
  // tier is host memory). The block then copies the expert's rows to host_rows().x at their
  // grouped positions (MoeRouteArgs::expert_offsets), calls RunOnHost while the device computes
  // the other experts, and copies host_rows().out back, instead of Get; such experts are left out
  // of WillUse.
  virtual bool PrefersHost(int32_t layer, int32_t expert, int32_t rows) {
    (void)layer;
    (void)expert;
    (void)rows;
    return false;
  }
  virtual HostRows host_rows() { return {}; }
  // host_rows().out[first, first + rows) = the expert's MLP of host_rows().x[first, first +
  // rows), on the host CPU.
  virtual absl::Status RunOnHost(int32_t layer, int32_t expert, int32_t first, int32_t rows) {
    (void)layer;
    (void)expert;
    (void)first;
    (void)rows;
    return absl::UnimplementedError("this expert provider computes nothing on the host");
  }
};

}  // namespace loom
