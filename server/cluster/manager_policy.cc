#include "server/cluster/manager_policy.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "engine/common/strings.h"
#include "scheduler/load.h"

namespace loom::cluster {

std::vector<std::pair<const char*, int64_t>> LoadCounts(const v1::InstanceLoad& l) {
  return {{"num_blocks", l.num_blocks()},
          {"num_free_blocks", l.num_free_blocks()},
          {"num_running", l.num_running()},
          {"num_waiting", l.num_waiting()},
          {"head_of_line_blocks", l.head_of_line_blocks()},
          {"batch_size", l.batch_size()},
          {"num_preemptions", l.num_preemptions()},
          {"num_preempted_waiting", l.num_preempted_waiting()},
          {"num_migrating", l.num_migrating()},
          {"shortest_running_blocks", l.shortest_running_blocks()},
          {"num_dispatched_in", static_cast<int64_t>(l.num_dispatched_in())}};
}
namespace {

absl::Status ValidateReport(const v1::InstanceReport& report) {
  if (report.instance_id().empty()) return absl::InvalidArgumentError("instance_id is empty");
  if (report.instance_id().size() > kMaxInstanceIdLen) {
    return absl::InvalidArgumentError(
        StrCat("instance_id is longer than ", kMaxInstanceIdLen, " bytes"));
  }
  const v1::InstanceLoad& l = report.load();
  if (std::isnan(l.freeness()) || std::isnan(l.dispatch_freeness())) {
    return absl::InvalidArgumentError(
        StrCat("instance ", report.instance_id(), " reported a NaN freeness"));
  }
  for (const auto& [name, value] : LoadCounts(l)) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          StrCat("instance ", report.instance_id(), " reported a negative load.", name));
    }
  }
  return absl::OkStatus();
}

// Freeness times the batch it is spread over: free blocks minus virtual demand.
double AvailableBlocks(double freeness, double batch_size) {
  return ClampFreeness(freeness) * std::max(batch_size, 1.0);
}

}  // namespace

double ClampFreeness(double freeness) {
  if (std::isnan(freeness)) return 0.0;
  return std::clamp(freeness, -kFreenessLimit, kFreenessLimit);
}

double FreenessAfterMoveOut(double freeness, int32_t batch_size, int32_t blocks) {
  return (AvailableBlocks(freeness, batch_size) + blocks) / std::max(batch_size - 1, 1);
}

double FreenessAfterMoveIn(double freeness, int32_t batch_size, int32_t blocks) {
  return (AvailableBlocks(freeness, batch_size) - blocks) / (std::max(batch_size, 0) + 1);
}

ManagerPolicy::ManagerPolicy(const ManagerPolicyOptions& options, uint64_t seed)
    : options_(options), rng_(seed) {
  options_.dispatch_top_k = std::max(options_.dispatch_top_k, 1);
}

absl::StatusOr<v1::ReportReply> ManagerPolicy::Report(const v1::InstanceReport& report,
                                                      int64_t now_ms) {
  if (absl::Status s = ValidateReport(report); !s.ok()) return s;
  DropSilent(now_ms);
  auto it = table_.find(report.instance_id());
  if (it == table_.end()) {
    if (table_.size() >= kMaxInstances) {
      return absl::ResourceExhaustedError(
          StrCat("the manager already tracks ", kMaxInstances, " instances"));
    }
    it = table_.emplace(report.instance_id(), Instance{}).first;
  }
  Instance& instance = it->second;
  // Two live instances under one id would share request keys and each other's orders: the
  // second is refused until the first has been silent long enough to be dropped (a restart
  // at a new address waits at most manager_instance_timeout_ms).
  if (!instance.grpc_address.empty() && instance.grpc_address != report.grpc_address()) {
    return absl::AlreadyExistsError(
        StrCat("instance id ", report.instance_id(), " is in use by the instance at ",
               instance.grpc_address, "; give each instance its own instance_id"));
  }
  // An order whose destination is gone or now draining is void.
  if (instance.has_order) {
    auto dst = table_.find(instance.order.destination_instance());
    if (dst == table_.end() || dst->second.draining()) instance.has_order = false;
  }
  instance.grpc_address = report.grpc_address();
  instance.http_address = report.http_address();
  instance.load = report.load();
  // Dispatches the instance has taken in since its last report are in its load now; the rest
  // (and the expired) still count against it. A count that went down is a restarted instance.
  const uint64_t taken_in = report.load().num_dispatched_in();
  uint64_t shown = taken_in >= instance.dispatched_in ? taken_in - instance.dispatched_in : 0;
  instance.dispatched_in = taken_in;
  auto& pending = instance.pending_dispatches;
  for (; shown > 0 && !pending.empty(); --shown) pending.pop_front();
  while (!pending.empty() && now_ms - pending.front().first > kPendingDispatchMs) {
    pending.pop_front();
  }
  for (const auto& [at_ms, prompt_tokens] : pending) ChargeDispatch(instance.load, prompt_tokens);
  instance.report_seq = report.report_seq();
  instance.last_report_ms = now_ms;
  v1::ReportReply reply;
  reply.set_drain(instance.drain_requested);
  if (instance.has_order) {
    *reply.add_migrate() = std::move(instance.order);
    instance.has_order = false;
    ++num_migration_orders_;
  }
  return reply;
}

std::vector<const ManagerPolicy::Table::value_type*> ManagerPolicy::Serving() const {
  std::vector<const Table::value_type*> out;
  for (const auto& entry : table_) {
    if (!entry.second.draining()) out.push_back(&entry);
  }
  return out;
}

v1::DispatchReply ManagerPolicy::Dispatch(int32_t prompt_tokens, int32_t /*priority*/,
                                          int64_t now_ms) {
  DropSilent(now_ms);
  std::vector<const Table::value_type*> candidates = Serving();
  const auto busy = [&](const Table::value_type* e) {
    return ClampFreeness(e->second.load.dispatch_freeness()) < options_.migrate_out_below;
  };
  if (!std::all_of(candidates.begin(), candidates.end(), busy)) {
    std::erase_if(candidates, busy);
  }
  v1::DispatchReply reply;
  if (candidates.empty()) return reply;
  // Best first; the table is ordered by id, so a stable sort breaks ties by id.
  std::stable_sort(candidates.begin(), candidates.end(), [](const auto* a, const auto* b) {
    return ClampFreeness(a->second.load.dispatch_freeness()) >
           ClampFreeness(b->second.load.dispatch_freeness());
  });
  const size_t k = std::min(candidates.size(), static_cast<size_t>(options_.dispatch_top_k));
  const double kth = ClampFreeness(candidates[k - 1]->second.load.dispatch_freeness());
  size_t pool = k;
  while (pool < candidates.size() &&
         ClampFreeness(candidates[pool]->second.load.dispatch_freeness()) >= kth) {
    ++pool;
  }
  std::uniform_int_distribution<size_t> pick(0, pool - 1);
  const Table::value_type* chosen = candidates[pick(rng_)];
  reply.set_instance_id(chosen->first);
  reply.set_grpc_address(chosen->second.grpc_address);
  ++num_dispatches_;
  // The request counts against the chosen instance until it shows in its reports (file comment
  // of manager_policy.h): a burst is spread instead of herding onto the instance that looked
  // best.
  Instance& instance = table_.find(chosen->first)->second;
  ChargeDispatch(instance.load, prompt_tokens);
  instance.pending_dispatches.emplace_back(now_ms, prompt_tokens);
  return reply;
}

void ManagerPolicy::ChargeDispatch(v1::InstanceLoad& load, int32_t prompt_tokens) {
  const int32_t n = load.num_running() + load.num_waiting();
  const double need = std::ceil(std::max(prompt_tokens, 1) / 16.0);
  const double blocks = UnspreadBlocks(ClampFreeness(load.dispatch_freeness()), n) - need;
  load.set_dispatch_freeness(SpreadBlocks(blocks, n + 1));
  load.set_num_waiting(load.num_waiting() + 1);
}

absl::Status ManagerPolicy::Drain(std::string_view instance_id, int64_t now_ms) {
  DropSilent(now_ms);
  auto it = table_.find(instance_id);
  if (it == table_.end()) {
    return absl::NotFoundError(StrCat("no instance `", instance_id, "` is known to the manager"));
  }
  it->second.drain_requested = true;
  return absl::OkStatus();
}

int32_t ManagerPolicy::Pair(int64_t now_ms) {
  DropSilent(now_ms);
  std::vector<Table::value_type*> sources, destinations;
  for (auto& entry : table_) {
    entry.second.has_order = false;
    switch (RoleOf(entry.second)) {
      case PairRole::kSource: sources.push_back(&entry); break;
      case PairRole::kDestination: destinations.push_back(&entry); break;
      case PairRole::kNone: break;
    }
  }
  // Worst source first (must-move before the rest), best destination first; stable: ties by id.
  std::stable_sort(sources.begin(), sources.end(), [](const auto* a, const auto* b) {
    const bool ma = MustMove(a->second), mb = MustMove(b->second);
    if (ma != mb) return ma;
    return ClampFreeness(a->second.load.freeness()) < ClampFreeness(b->second.load.freeness());
  });
  std::stable_sort(destinations.begin(), destinations.end(), [](const auto* a, const auto* b) {
    return ClampFreeness(a->second.load.freeness()) > ClampFreeness(b->second.load.freeness());
  });
  int32_t num_orders = 0;
  for (size_t i = 0; i < std::min(sources.size(), destinations.size()); ++i) {
    Instance& src = sources[i]->second;
    const Instance& dst = destinations[i]->second;
    const bool must_move = MustMove(src);
    if (!must_move && !MoveNarrowsGap(src.load, dst.load)) continue;
    src.order.Clear();
    src.order.set_destination_instance(destinations[i]->first);
    src.order.set_destination_address(dst.grpc_address);
    // A draining instance sends everything it has; any other, its shortest running request.
    src.order.set_max_requests(must_move ? src.load.num_running() + src.load.num_waiting() : 1);
    src.has_order = true;
    ++num_orders;
  }
  return num_orders;
}

ManagerPolicy::PairRole ManagerPolicy::RoleOf(const Instance& instance) const {
  const v1::InstanceLoad& l = instance.load;
  const double freeness = ClampFreeness(l.freeness());
  if (MustMove(instance)) {
    return l.num_running() + l.num_waiting() > 0 ? PairRole::kSource : PairRole::kNone;
  }
  if (freeness < options_.migrate_out_below || l.num_preempted_waiting() > 0) {
    // Only a running request is ever moved; without one there is nothing to order. Without
    // load-balancing migrations only drains move requests.
    return options_.migration && l.shortest_running_blocks() > 0 ? PairRole::kSource
                                                                  : PairRole::kNone;
  }
  return freeness > options_.migrate_in_above ? PairRole::kDestination : PairRole::kNone;
}

bool ManagerPolicy::MoveNarrowsGap(const v1::InstanceLoad& src,
                                   const v1::InstanceLoad& dst) const {
  const int32_t blocks = src.shortest_running_blocks();
  const double src_after = FreenessAfterMoveOut(src.freeness(), src.batch_size(), blocks);
  const double dst_after = FreenessAfterMoveIn(dst.freeness(), dst.batch_size(), blocks);
  const double gap_before = ClampFreeness(dst.freeness()) - ClampFreeness(src.freeness());
  return std::abs(dst_after - src_after) < std::abs(gap_before) &&
         dst_after > options_.migrate_in_above;
}

int32_t ManagerPolicy::DropSilent(int64_t now_ms) {
  const size_t before = table_.size();
  std::erase_if(table_, [&](const auto& entry) {
    return now_ms - entry.second.last_report_ms > options_.instance_timeout_ms;
  });
  const auto dropped = static_cast<int32_t>(before - table_.size());
  num_instances_dropped_ += dropped;
  return dropped;
}

v1::ListInstancesReply ManagerPolicy::List(int64_t now_ms) {
  DropSilent(now_ms);
  v1::ListInstancesReply reply;
  for (const auto& [id, instance] : table_) {
    v1::InstanceStatus* status = reply.add_instances();
    status->set_instance_id(id);
    status->set_grpc_address(instance.grpc_address);
    status->set_http_address(instance.http_address);
    *status->mutable_load() = instance.load;
    status->set_last_report_age_ms(now_ms - instance.last_report_ms);
    status->set_draining(instance.draining());
  }
  return reply;
}

ClusterSummary ManagerPolicy::Summary(int64_t now_ms) {
  DropSilent(now_ms);
  ClusterSummary out;
  out.num_instances = static_cast<int32_t>(table_.size());
  out.num_dispatches = num_dispatches_;
  out.num_migration_orders = num_migration_orders_;
  out.num_instances_dropped = num_instances_dropped_;
  const std::vector<const Table::value_type*> serving = Serving();
  out.num_draining = out.num_instances - static_cast<int32_t>(serving.size());
  if (serving.empty()) {
    out.scale_signal = out.num_draining > 0 ? ScaleSignal::kScaleOut : ScaleSignal::kNone;
    return out;
  }
  const double n = static_cast<double>(serving.size());
  double sum = 0.0;
  const Table::value_type* freest = serving.front();
  for (const Table::value_type* e : serving) {
    const double f = ClampFreeness(e->second.load.freeness());
    sum += f;
    if (f > ClampFreeness(freest->second.load.freeness())) freest = e;
  }
  out.average_freeness = sum / n;
  if (serving.size() >= 2) {
    // The freest instance's load (blocks in use or virtually demanded) and batch move to the
    // others, spread evenly.
    const v1::InstanceLoad& r = freest->second.load;
    const double load_blocks =
        std::max(0.0, r.num_blocks() - AvailableBlocks(r.freeness(), r.batch_size()));
    const double extra_blocks = load_blocks / (n - 1);
    const double extra_batch = r.batch_size() / (n - 1);
    double sum_after = 0.0;
    for (const Table::value_type* e : serving) {
      if (e == freest) continue;
      const v1::InstanceLoad& l = e->second.load;
      const double available = AvailableBlocks(l.freeness(), l.batch_size()) - extra_blocks;
      sum_after += ClampFreeness(available / std::max(l.batch_size() + extra_batch, 1.0));
    }
    out.average_freeness_one_fewer = sum_after / (n - 1);
  }
  if (out.average_freeness < options_.scale_out_below) {
    out.scale_signal = ScaleSignal::kScaleOut;
  } else if (serving.size() >= 2 && out.average_freeness_one_fewer > options_.scale_in_above) {
    out.scale_signal = ScaleSignal::kScaleIn;
  }
  return out;
}

const v1::MigrateOrder* ManagerPolicy::PendingOrder(std::string_view instance_id) const {
  auto it = table_.find(instance_id);
  if (it == table_.end() || !it->second.has_order) return nullptr;
  return &it->second.order;
}

}  // namespace loom::cluster
