// Scheduler: the expert-cache policy's hooks in the step loop (scheduler/experts/
// expert_cache_driver.h). Called only when the model has an expert cache (experts_ != null),
// except EndRequestExperts, which checks.
#include "engine/common/logging.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_state.h"

namespace loom {

// After the plan's sequences are final (in_flight_ in plan order).
void Scheduler::PlanExperts(StepPlan& plan) {
  plan.report_expert_routing = true;
  expert_requests_.clear();
  for (const auto& [seq, num_tokens] : in_flight_) expert_requests_.push_back(seq->req->params.id);
  experts_->PlanStep(expert_requests_, plan);
}

// Before the output is applied: applying it may finish the request, which hands its matrix,
// this step's routing included, to the collection.
void Scheduler::RecordRouting(const Seq& seq, const SequenceOutput& out) {
  const absl::Status status = experts_->AddRouting(seq.req->params.id, out.expert_counts);
  if (status.ok() || logged_bad_routing_) return;
  // Routing only steers the cache; a record that does not fit is dropped, the step stands.
  logged_bad_routing_ = true;
  LOOM_LOG(kWarning, "ignoring the engine's expert routing (reported once): ", status.message());
}

void Scheduler::EndRequestExperts(RequestId id) {
  if (experts_ != nullptr) experts_->FinishRequest(id);
}

}  // namespace loom
