// The cluster manager's decisions (Llumnix's global scheduler; shared/ARCHITECTURE.md §6): the
// table of instances built from their load reports, dispatch of new requests, pairing of
// instances for live migration, draining, and the scale-out / scale-in signal. It sees only
// instance-level load (proto/loom/v1/cluster.proto InstanceLoad), never a request or a token.
//
// Freeness (the file comment of cluster.proto): free KV blocks per request of an instance's
// batch, virtual demand counted (times block_size: the decode steps left before the cache is
// full). Higher is less loaded; negative means queued demand exceeds free memory; -infinity
// means "move everything off me" (draining). The manager ranks and compares by it, and
// estimates it after a move by taking it to be
//   freeness = (num_free_blocks - virtual demand) / max(batch_size, 1)
// so that moving a request of b blocks from S to D gives
//   S: (F_S * max(B_S, 1) + b) / max(B_S - 1, 1)      D: (F_D * max(B_D, 1) - b) / (B_D + 1).
// Infinite values (an idle instance may report +inf, a draining one -inf) are clamped to
// +-kFreenessLimit before any arithmetic, so no average, estimate or metric is ever NaN or
// infinite. NaN is refused at Report.
//
// Rules (each is one method below):
// - Registration: the first Report of an id registers it; every later one replaces its load,
//   except for the dispatches it does not show yet (below).
//   An instance silent for longer than instance_timeout_ms is dropped (and counted) by the next
//   call that looks at the table; a later Report registers it afresh (not draining).
// - Dispatch: among live instances that are neither draining nor busy (dispatch_freeness below
//   migrate_out_below: an instance that should shed load takes none), rank by dispatch_freeness,
//   higher first, and pick uniformly at random among the top-k (every instance tied with the
//   k-th is in the pool). When every candidate is busy, the same ranking runs over the busy ones
//   (the request has to run somewhere; the least loaded place is the best). No candidate at
//   all: an empty answer (the entry instance runs it). A dispatch counts against its instance
//   at once, as one more waiting request needing its prompt's blocks (16 tokens each), and
//   keeps counting, on top of each report, until the instance's num_dispatched_in shows that
//   it has taken the request in (or kPendingDispatchMs pass: a forward that failed). A report
//   taken before a forwarded request reached the instance's scheduler would otherwise erase the
//   charge, and a burst would herd onto the instance that looked best.
// - Pairing (Pair, every pair interval): sources are the instances that must move everything
//   (draining, or reporting -inf) with anything left to move, and the instances with freeness
//   below migrate_out_below or with preempted waiting requests that have a running request to
//   move; destinations are the other instances that are not draining, have no preempted waiting
//   requests and freeness above migrate_in_above. Sources sorted worst first (must-move first),
//   destinations best first, ties by id; the i-th source pairs with the i-th destination. A pair
//   gets an order only if moving the source's shortest running request narrows the freeness gap
//   between them (|F_D' - F_S'| < |F_D - F_S|) and leaves F_D' above migrate_in_above; a
//   must-move source always gets its order (for all it has). Each round replaces the orders of
//   the previous one; Report hands an instance its order once.
// - Drain: an instance marked draining gets no dispatches, is a source every round until it is
//   gone, and every ReportReply tells it drain = true.
// - Scale signal: over live instances that are not draining, the average (clamped) freeness.
//   +1 (scale out) while it is below scale_out_below; -1 (scale in) when, with two or more
//   instances, the average computed as if the least loaded one were removed — its load blocks
//   (num_blocks - freeness * max(batch_size, 1)) and its batch spread evenly over the others —
//   is above scale_in_above; otherwise 0. The removal estimate is the hysteresis: a scale-in
//   never leaves a cluster that would at once ask to scale out again. With no instance left
//   that is not draining: +1 if some are draining (capacity is going away), 0 if none is known.
//
// Pure and single-threaded: the caller serializes calls and passes the time; randomness comes
// from a generator seeded at construction.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/v1/cluster.pb.h"

namespace loom::cluster {

// |freeness| beyond this is clamped (it stands for +-infinity).
inline constexpr double kFreenessLimit = 1e9;
inline constexpr double kInfinity = std::numeric_limits<double>::infinity();
// How long a dispatch the instance has not taken in keeps counting against it.
inline constexpr int64_t kPendingDispatchMs = 2000;
// Instances the table holds at most; a report from one more is refused.
inline constexpr size_t kMaxInstances = 4096;
// The longest instance id accepted.
inline constexpr size_t kMaxInstanceIdLen = 256;

// The counts of a load report by field name (validation and the HTTP listing walk them).
std::vector<std::pair<const char*, int64_t>> LoadCounts(const v1::InstanceLoad& load);

struct ManagerPolicyOptions {
  int64_t instance_timeout_ms = 3000;
  int32_t dispatch_top_k = 2;
  double migrate_out_below = 3.0;
  double migrate_in_above = 10.0;
  double scale_out_below = 5.0;
  double scale_in_above = 60.0;
  // false: no load-balancing migrations (dispatch only); drains still move requests.
  bool migration = true;
};

// The scale signal: add an instance, keep, or remove one.
enum class ScaleSignal : int { kScaleIn = -1, kNone = 0, kScaleOut = 1 };

// What /metrics shows; every double is finite.
struct ClusterSummary {
  int32_t num_instances = 0;           // live, draining included
  int32_t num_draining = 0;
  double average_freeness = 0.0;       // over live instances that are not draining; 0 if none
  double average_freeness_one_fewer = 0.0;  // the scale-in estimate; 0 below two instances
  ScaleSignal scale_signal = ScaleSignal::kNone;
  int64_t num_dispatches = 0;          // answers that named an instance
  int64_t num_migration_orders = 0;    // orders handed out in ReportReplies
  int64_t num_instances_dropped = 0;   // silent past the timeout
};

class ManagerPolicy {
 public:
  ManagerPolicy(const ManagerPolicyOptions& options, uint64_t seed);

  // Registers or updates the reporting instance and answers with its pending order (taken
  // out of the table) and whether it is to drain. InvalidArgument for an empty or overlong id,
  // a NaN freeness or a negative count; ResourceExhausted when the table is full;
  // AlreadyExists when another live instance (another gRPC address) reports under the same id.
  absl::StatusOr<v1::ReportReply> Report(const v1::InstanceReport& report, int64_t now_ms);

  // Where a new request should run; empty when no instance is known. Arguments are accepted
  // for the protocol's sake and do not change the ranking.
  v1::DispatchReply Dispatch(int32_t prompt_tokens, int32_t priority, int64_t now_ms);

  // Marks the instance draining. NotFound for an id that is not (or no longer) in the table.
  // Idempotent.
  absl::Status Drain(std::string_view instance_id, int64_t now_ms);

  // One pairing round: replaces the pending orders with this round's. Returns how many.
  int32_t Pair(int64_t now_ms);

  // Drops instances silent for longer than the timeout; returns how many. Every other method
  // does this first.
  int32_t DropSilent(int64_t now_ms);

  // The table, ordered by id.
  v1::ListInstancesReply List(int64_t now_ms);

  ClusterSummary Summary(int64_t now_ms);

  // The order waiting for `instance_id`'s next report, if any (for tests and listings).
  const v1::MigrateOrder* PendingOrder(std::string_view instance_id) const;

 private:
  struct Instance {
    std::string grpc_address;
    std::string http_address;
    v1::InstanceLoad load;
    uint64_t report_seq = 0;
    int64_t last_report_ms = 0;
    bool drain_requested = false;  // by Drain (the instance may also report it itself)
    bool has_order = false;
    v1::MigrateOrder order;
    // Dispatches sent here that the instance's reports do not show yet, oldest first: when
    // each was made and its prompt's tokens.
    std::deque<std::pair<int64_t, int32_t>> pending_dispatches;
    uint64_t dispatched_in = 0;  // num_dispatched_in of the last report

    bool draining() const { return drain_requested || load.draining(); }
  };
  using Table = std::map<std::string, Instance, std::less<>>;
  enum class PairRole { kNone, kSource, kDestination };

  // An instance that wants everything moved off it: draining (by Drain or by its own report), or
  // reporting -infinity, which the sign convention reserves for that.
  static bool MustMove(const Instance& instance) {
    return instance.draining() || instance.load.freeness() == -kInfinity;
  }
  PairRole RoleOf(const Instance& instance) const;
  // Counts a request of `prompt_tokens` dispatched to an instance in its load: one more waiting
  // request needing its prompt's blocks.
  static void ChargeDispatch(v1::InstanceLoad& load, int32_t prompt_tokens);
  // Whether moving `src`'s shortest running request to `dst` narrows their gap and leaves `dst`
  // above migrate_in_above.
  bool MoveNarrowsGap(const v1::InstanceLoad& src, const v1::InstanceLoad& dst) const;

  // Live instances in `table_` that are not draining.
  std::vector<const Table::value_type*> Serving() const;

  ManagerPolicyOptions options_;
  std::mt19937_64 rng_;
  Table table_;
  int64_t num_dispatches_ = 0;
  int64_t num_migration_orders_ = 0;
  int64_t num_instances_dropped_ = 0;
};

// `freeness` clamped into [-kFreenessLimit, kFreenessLimit] (NaN becomes 0).
double ClampFreeness(double freeness);

// The estimated freeness of a source after one request of `blocks` blocks left it, and of a
// destination after it arrived (the formulas of the file comment; inputs clamped).
double FreenessAfterMoveOut(double freeness, int32_t batch_size, int32_t blocks);
double FreenessAfterMoveIn(double freeness, int32_t batch_size, int32_t blocks);

}  // namespace loom::cluster
