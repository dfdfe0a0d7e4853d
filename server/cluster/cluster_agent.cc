#include "server/cluster/cluster_agent.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "engine/common/logging.h"
#include "server/cluster/cluster_auth.h"
#include "server/cluster/loop_call.h"

namespace loom::cluster {

ClusterAgent::ClusterAgent(ServingContext& context, Migrator& migrator, std::string instance_id,
                           std::string grpc_address, std::string http_address)
    : ctx_(context),
      migrator_(migrator),
      instance_id_(std::move(instance_id)),
      grpc_address_(std::move(grpc_address)),
      http_address_(std::move(http_address)) {}

ClusterAgent::~ClusterAgent() { Stop(); }

void ClusterAgent::Start() {
  if (ctx_.config.cluster_manager.empty()) return;
  manager_ = v1::Manager::NewStub(
      grpc::CreateChannel(ctx_.config.cluster_manager, migrator_.credentials()));
  reporter_ = std::thread([this] { ReportLoop(); });
  worker_ = std::thread([this] { WorkLoop(); });
}

void ClusterAgent::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (reporter_.joinable()) reporter_.join();
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<RequestStream> ClusterAgent::Submit(SchedRequest request) {
  auto stream = std::make_shared<RequestStream>(request.id, std::max(request.n, 1));
  const bool movable = request.n == 1 && request.sampling.prompt_logprobs < 0;
  if (manager_ != nullptr && ctx_.config.cluster_dispatch && movable &&
      manager_reachable_.load() && !ctx_.draining.load()) {
    grpc::ClientContext call;
    AddClusterAuth(call, ctx_.config.api_keys);
    call.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    v1::DispatchRequest ask;
    ask.set_from_instance(instance_id_);
    ask.set_prompt_tokens(static_cast<int32_t>(request.prompt.size()));
    ask.set_priority(request.priority);
    v1::DispatchReply where;
    if (manager_->Dispatch(&call, ask, &where).ok() && !where.grpc_address().empty()) {
      if (where.instance_id() != instance_id_ && where.grpc_address() != grpc_address_) {
        migrator_.Forward(std::move(request), where.grpc_address(), stream);
        return stream;
      }
      // Dispatched here. The loop adds its inbox before it runs posted commands, so the count
      // moves once the request is in the scheduler, never before.
      ctx_.engine->SubmitTo(std::move(request), stream);
      ctx_.engine->Post([counter = &ctx_.num_dispatched_in](LoopAccess&) { ++*counter; });
      return stream;
    }
  }
  ctx_.engine->SubmitTo(std::move(request), stream);
  return stream;
}

v1::InstanceLoad ClusterAgent::CurrentLoad() {
  const bool draining = ctx_.draining.load() || drain_ordered_.load();
  const int32_t below = static_cast<int32_t>(ctx_.config.high_priority_below);
  const double headroom = ctx_.config.priority_headroom_fraction;
  struct Snapshot {
    LoadReport report;
    int32_t shortest_blocks = 0;
    uint64_t dispatched_in = 0;
  };
  std::optional<Snapshot> snap = CallOnLoop<Snapshot>(
      *ctx_.engine, 1000,
      [draining, below, headroom, counter = &ctx_.num_dispatched_in](
          LoopAccess& loop, std::function<void(Snapshot)> reply) {
        auto shortest = loop.scheduler().ShortestMovableRequest();
        reply(Snapshot{loop.scheduler().Load(draining, below, headroom),
                       shortest ? shortest->second : 0, counter->load()});
      });
  v1::InstanceLoad load;
  if (!snap.has_value()) return load;
  const LoadInputs& in = snap->report.inputs;
  load.set_num_blocks(in.num_blocks);
  load.set_num_free_blocks(in.num_free_blocks);
  load.set_num_running(in.num_running);
  load.set_num_waiting(in.num_waiting);
  load.set_head_of_line_blocks(in.head_of_line_blocks);
  load.set_batch_size(in.num_running);
  load.set_num_preemptions(ctx_.engine->Stats().scheduler.num_preemptions);
  load.set_num_preempted_waiting(in.num_preempted_waiting);
  load.set_has_high_priority(in.has_high_priority);
  load.set_draining(draining);
  // The wire carries the lowest finite double for a draining instance's -infinity.
  const auto finite = [](double v) {
    return std::isfinite(v) ? v : (v < 0 ? std::numeric_limits<double>::lowest()
                                         : std::numeric_limits<double>::max());
  };
  load.set_freeness(finite(snap->report.freeness));
  load.set_dispatch_freeness(finite(snap->report.dispatch_freeness));
  load.set_num_migrating(migrator_.num_in_flight());
  load.set_shortest_running_blocks(snap->shortest_blocks);
  load.set_num_dispatched_in(snap->dispatched_in);
  return load;
}

void ClusterAgent::ReportLoop() {
  uint64_t seq = 0;
  bool was_reachable = true;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(ctx_.config.cluster_report_interval_ms),
                       [&] { return stopping_; })) {
        return;
      }
    }
    v1::InstanceReport report;
    report.set_instance_id(instance_id_);
    report.set_grpc_address(grpc_address_);
    report.set_http_address(http_address_);
    *report.mutable_load() = CurrentLoad();
    report.set_report_seq(++seq);
    grpc::ClientContext call;
    AddClusterAuth(call, ctx_.config.api_keys);
    call.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1000));
    v1::ReportReply reply;
    const grpc::Status s = manager_->Report(&call, report, &reply);
    manager_reachable_ = s.ok();
    if (!s.ok()) {
      if (was_reachable) {
        // A refusal (a shared instance id, a wrong key) is a configuration error, not a fault.
        const bool refused = s.error_code() == grpc::StatusCode::ALREADY_EXISTS ||
                             s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                             s.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
        LOOM_LOG(kWarning, "the cluster manager at ", ctx_.config.cluster_manager,
                 refused ? " refuses this instance (" : " is unreachable (", s.error_message(),
                 "); serving on our own");
      }
      was_reachable = false;
      continue;
    }
    if (!was_reachable) LOOM_LOG(kInfo, "the cluster manager answers again");
    was_reachable = true;
    if (reply.drain() && !drain_ordered_.exchange(true)) {
      LOOM_LOG(kInfo, "the manager drains this instance: moving its requests off");
    }
    if (reply.migrate_size() > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      // Orders are not queued up behind a busy worker: a stale order is worse than none.
      if (orders_.empty() && migrator_.num_in_flight() == 0) {
        orders_.assign(reply.migrate().begin(), reply.migrate().end());
        cv_.notify_all();
      }
    }
  }
}

void ClusterAgent::WorkLoop() {
  for (;;) {
    std::vector<v1::MigrateOrder> orders;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !orders_.empty(); });
      if (stopping_) return;
      orders.swap(orders_);
    }
    for (const v1::MigrateOrder& order : orders) {
      if (order.destination_address().empty() || order.destination_address() == grpc_address_) {
        continue;
      }
      migrator_.MigrateOut(order.destination_address(), std::max(order.max_requests(), 1),
                           std::nullopt);
    }
  }
}

}  // namespace loom::cluster
