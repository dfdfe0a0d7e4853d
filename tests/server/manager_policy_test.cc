// The cluster manager's policy (server/cluster/manager_policy.h) on hand-made load reports, an
// injected clock and seeded randomness: registration and dropping, top-k dispatch (ties,
// draining and busy instances left out), migration pairing (worst with best, the gap-narrows
// rule, one order per instance, draining sources), drain, the scale signal with its
// hysteresis, and the freeness sign convention (higher = less loaded, -infinity = draining).
#include "server/cluster/manager_policy.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace loom::cluster {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

ManagerPolicyOptions Options() {
  ManagerPolicyOptions o;
  o.instance_timeout_ms = 1000;
  o.dispatch_top_k = 2;
  o.migrate_out_below = 3.0;
  o.migrate_in_above = 10.0;
  o.scale_out_below = 5.0;
  o.scale_in_above = 60.0;
  return o;
}

// A report whose freeness and dispatch freeness are both `freeness`.
v1::InstanceReport MakeReport(const std::string& id, double freeness, int32_t batch_size = 1,
                              int32_t shortest_running_blocks = 1) {
  v1::InstanceReport r;
  r.set_instance_id(id);
  r.set_grpc_address(id + ":7000");
  r.set_http_address(id + ":8000");
  v1::InstanceLoad* l = r.mutable_load();
  l->set_num_blocks(1000);
  l->set_num_free_blocks(500);
  l->set_num_running(batch_size);
  l->set_batch_size(batch_size);
  l->set_freeness(freeness);
  l->set_dispatch_freeness(freeness);
  l->set_shortest_running_blocks(batch_size > 0 ? shortest_running_blocks : 0);
  return r;
}

v1::ReportReply MustReport(ManagerPolicy& policy, const v1::InstanceReport& r, int64_t now_ms) {
  absl::StatusOr<v1::ReportReply> reply = policy.Report(r, now_ms);
  EXPECT_TRUE(reply.ok()) << reply.status();
  return reply.ok() ? *reply : v1::ReportReply();
}

// Reports "a" (freeness 40 over 4 running: 160 blocks) and "b" (36 over 4: 144 blocks), neither
// showing any dispatch taken in yet.
void ReportAAndB(ManagerPolicy& policy, int64_t now_ms) {
  MustReport(policy, MakeReport("a", 40.0, 4, 1), now_ms);
  MustReport(policy, MakeReport("b", 36.0, 4, 1), now_ms);
}

// How often each instance was chosen in `draws` dispatches, each after `reports` came in again,
// every instance having taken in what was dispatched to it (so a dispatch counts against its
// instance only until that instance's next report).
std::map<std::string, int> DispatchCounts(ManagerPolicy& policy, int draws, int64_t now_ms,
                                          const std::vector<v1::InstanceReport>& reports) {
  std::map<std::string, int> counts;
  for (int i = 0; i < draws; ++i) {
    for (v1::InstanceReport r : reports) {
      auto it = counts.find(r.instance_id());
      r.mutable_load()->set_num_dispatched_in(it == counts.end() ? 0 : it->second);
      EXPECT_TRUE(policy.Report(r, now_ms).ok());
    }
    ++counts[policy.Dispatch(10, 0, now_ms).instance_id()];
  }
  return counts;
}

// The destination of each pending order, by source.
std::map<std::string, std::string> Orders(const ManagerPolicy& policy,
                                          const std::set<std::string>& ids) {
  std::map<std::string, std::string> out;
  for (const std::string& id : ids) {
    if (const v1::MigrateOrder* o = policy.PendingOrder(id)) out[id] = o->destination_instance();
  }
  return out;
}

TEST(ManagerPolicyTest, FirstReportRegistersAndLaterOnesUpdate) {
  ManagerPolicy policy(Options(), 1);
  EXPECT_EQ(policy.List(0).instances_size(), 0);
  MustReport(policy, MakeReport("a", 50.0), 0);
  v1::ListInstancesReply list = policy.List(100);
  ASSERT_EQ(list.instances_size(), 1);
  EXPECT_EQ(list.instances(0).instance_id(), "a");
  EXPECT_EQ(list.instances(0).grpc_address(), "a:7000");
  EXPECT_EQ(list.instances(0).http_address(), "a:8000");
  EXPECT_EQ(list.instances(0).last_report_age_ms(), 100);
  EXPECT_DOUBLE_EQ(list.instances(0).load().freeness(), 50.0);
  EXPECT_FALSE(list.instances(0).draining());

  MustReport(policy, MakeReport("a", 7.0), 200);
  list = policy.List(250);
  ASSERT_EQ(list.instances_size(), 1);
  EXPECT_DOUBLE_EQ(list.instances(0).load().freeness(), 7.0);
  EXPECT_EQ(list.instances(0).last_report_age_ms(), 50);
}

TEST(ManagerPolicyTest, SilentInstancesAreDroppedAndCounted) {
  ManagerPolicy policy(Options(), 1);  // timeout 1000 ms
  MustReport(policy, MakeReport("a", 50.0), 0);
  MustReport(policy, MakeReport("b", 50.0), 800);
  EXPECT_EQ(policy.DropSilent(1000), 0);  // exactly the timeout: still there
  EXPECT_EQ(policy.DropSilent(1001), 1);
  v1::ListInstancesReply list = policy.List(1001);
  ASSERT_EQ(list.instances_size(), 1);
  EXPECT_EQ(list.instances(0).instance_id(), "b");
  // Every call drops first: the summary at 1801 sees b gone too.
  ClusterSummary s = policy.Summary(1801);
  EXPECT_EQ(s.num_instances, 0);
  EXPECT_EQ(s.num_instances_dropped, 2);
  // A dropped instance that reports again is registered afresh, without its old drain mark.
  MustReport(policy, MakeReport("a", 50.0), 2000);
  ASSERT_TRUE(policy.Drain("a", 2000).ok());
  policy.DropSilent(3500);
  EXPECT_FALSE(MustReport(policy, MakeReport("a", 50.0), 3600).drain());
  EXPECT_EQ(policy.Summary(3600).num_instances, 1);
}

TEST(ManagerPolicyTest, ASecondLiveInstanceUnderOneIdIsRefused) {
  ManagerPolicy policy(Options(), 1);  // timeout 1000 ms
  MustReport(policy, MakeReport("a", 50.0), 0);
  v1::InstanceReport twin = MakeReport("a", 5.0);
  twin.set_grpc_address("elsewhere:7000");
  absl::StatusOr<v1::ReportReply> refused = policy.Report(twin, 500);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("a:7000"), std::string_view::npos);
  v1::ListInstancesReply list = policy.List(500);
  ASSERT_EQ(list.instances_size(), 1);
  EXPECT_EQ(list.instances(0).grpc_address(), "a:7000");
  EXPECT_EQ(list.instances(0).load().freeness(), 50.0);
  // The first goes silent and is dropped: the id is free for the one at the new address.
  MustReport(policy, twin, 1200);
  EXPECT_EQ(policy.List(1200).instances(0).grpc_address(), "elsewhere:7000");
}

TEST(ManagerPolicyTest, InvalidReportsAreRefusedAndChangeNothing) {
  ManagerPolicy policy(Options(), 1);
  v1::InstanceReport empty_id = MakeReport("", 5.0);
  v1::InstanceReport long_id = MakeReport(std::string(kMaxInstanceIdLen + 1, 'x'), 5.0);
  v1::InstanceReport nan = MakeReport("a", std::nan(""));
  v1::InstanceReport nan_dispatch = MakeReport("a", 5.0);
  nan_dispatch.mutable_load()->set_dispatch_freeness(std::nan(""));
  v1::InstanceReport negative = MakeReport("a", 5.0);
  negative.mutable_load()->set_num_free_blocks(-1);
  for (const v1::InstanceReport& r : {empty_id, long_id, nan, nan_dispatch, negative}) {
    absl::StatusOr<v1::ReportReply> reply = policy.Report(r, 0);
    EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(policy.List(0).instances_size(), 0);
  EXPECT_TRUE(policy.Report(MakeReport(std::string(kMaxInstanceIdLen, 'x'), 5.0), 0).ok());
}

TEST(ManagerPolicyTest, DispatchWithNoInstanceAnswersEmpty) {
  ManagerPolicy policy(Options(), 1);
  v1::DispatchReply reply = policy.Dispatch(100, 0, 0);
  EXPECT_TRUE(reply.instance_id().empty());
  EXPECT_TRUE(reply.grpc_address().empty());
  EXPECT_EQ(policy.Summary(0).num_dispatches, 0);
}

TEST(ManagerPolicyTest, DispatchPicksAtRandomAmongTheTopK) {
  ManagerPolicy policy(Options(), 7);  // k = 2
  const std::vector<v1::InstanceReport> reports = {
      MakeReport("a", 40.0), MakeReport("b", 100.0), MakeReport("c", 90.0), MakeReport("d", 20.0)};
  const std::map<std::string, int> counts = DispatchCounts(policy, 400, 0, reports);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_GT(counts.count("b") ? counts.at("b") : 0, 100);
  EXPECT_GT(counts.count("c") ? counts.at("c") : 0, 100);
  EXPECT_EQ(policy.Summary(0).num_dispatches, 400);
  EXPECT_EQ(policy.Dispatch(1, 0, 0).grpc_address().ends_with(":7000"), true);
}

TEST(ManagerPolicyTest, DispatchIsReproducibleForOneSeed) {
  ManagerPolicy first(Options(), 42), second(Options(), 42);
  for (ManagerPolicy* p : {&first, &second}) {
    for (const char* id : {"a", "b", "c"}) MustReport(*p, MakeReport(id, 50.0), 0);
  }
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(first.Dispatch(1, 0, 0).instance_id(), second.Dispatch(1, 0, 0).instance_id());
  }
}

TEST(ManagerPolicyTest, DispatchBreaksTiesAtTheKthAtRandom) {
  ManagerPolicyOptions o = Options();
  o.dispatch_top_k = 1;
  ManagerPolicy policy(o, 3);
  const std::map<std::string, int> counts = DispatchCounts(
      policy, 400, 0, {MakeReport("a", 100.0), MakeReport("b", 100.0), MakeReport("c", 50.0)});
  EXPECT_EQ(counts.count("c"), 0u);
  EXPECT_GT(counts.count("a") ? counts.at("a") : 0, 100);
  EXPECT_GT(counts.count("b") ? counts.at("b") : 0, 100);
}

TEST(ManagerPolicyTest, DispatchLeavesOutDrainingAndBusyInstances) {
  ManagerPolicyOptions o = Options();
  o.dispatch_top_k = 3;
  ManagerPolicy policy(o, 5);
  MustReport(policy, MakeReport("drained", 1000.0), 0);
  v1::InstanceReport self_draining = MakeReport("self", 900.0);
  self_draining.mutable_load()->set_draining(true);
  MustReport(policy, self_draining, 0);
  v1::InstanceReport busy = MakeReport("busy", 50.0);
  busy.mutable_load()->set_dispatch_freeness(2.0);  // below migrate_out_below (3)
  MustReport(policy, busy, 0);
  MustReport(policy, MakeReport("c", 20.0), 0);
  MustReport(policy, MakeReport("d", 10.0), 0);
  ASSERT_TRUE(policy.Drain("drained", 0).ok());
  std::map<std::string, int> counts =
      DispatchCounts(policy, 300, 0, {MakeReport("c", 20.0), MakeReport("d", 10.0)});
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts.count("c") + counts.count("d"), 2u);

  // Only busy instances left besides the draining ones: the least loaded busy one still gets it.
  ManagerPolicy crowded(o, 5);
  v1::InstanceReport worse = MakeReport("worse", 0.0);
  worse.mutable_load()->set_dispatch_freeness(-4.0);
  MustReport(crowded, worse, 0);
  MustReport(crowded, busy, 0);
  MustReport(crowded, MakeReport("drained", 1000.0), 0);
  ASSERT_TRUE(crowded.Drain("drained", 0).ok());
  o.dispatch_top_k = 1;
  ManagerPolicy crowded_k1(o, 5);
  for (const v1::InstanceReport& r : {worse, busy}) MustReport(crowded_k1, r, 0);
  counts = DispatchCounts(crowded_k1, 50, 0, {worse, busy});
  EXPECT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts.count("busy"), 1u);
  counts = DispatchCounts(crowded, 100, 0, {worse, busy});
  EXPECT_EQ(counts.count("drained"), 0u);

  // Nothing but draining instances: run it where it arrived.
  ManagerPolicy draining_only(o, 5);
  MustReport(draining_only, self_draining, 0);
  EXPECT_TRUE(draining_only.Dispatch(1, 0, 0).instance_id().empty());
}

TEST(ManagerPolicyTest, PairingMatchesWorstSourcesWithBestDestinations) {
  ManagerPolicy policy(Options(), 1);  // out below 3, in above 10
  MustReport(policy, MakeReport("s_worst", -5.0, 2, 1), 0);
  MustReport(policy, MakeReport("s_bad", 1.0, 2, 1), 0);
  MustReport(policy, MakeReport("neutral", 5.0, 2, 1), 0);
  MustReport(policy, MakeReport("d_good", 50.0, 2, 1), 0);
  MustReport(policy, MakeReport("d_best", 100.0, 2, 1), 0);
  EXPECT_EQ(policy.Pair(0), 2);
  const std::set<std::string> ids = {"s_worst", "s_bad", "neutral", "d_good", "d_best"};
  const std::map<std::string, std::string> expected = {{"s_worst", "d_best"},
                                                       {"s_bad", "d_good"}};
  EXPECT_EQ(Orders(policy, ids), expected);
  const v1::MigrateOrder* order = policy.PendingOrder("s_worst");
  ASSERT_NE(order, nullptr);
  EXPECT_EQ(order->destination_address(), "d_best:7000");
  EXPECT_EQ(order->max_requests(), 1);

  // The order goes out with the source's next report, once.
  v1::ReportReply reply = MustReport(policy, MakeReport("s_worst", -5.0, 2, 1), 10);
  ASSERT_EQ(reply.migrate_size(), 1);
  EXPECT_EQ(reply.migrate(0).destination_instance(), "d_best");
  EXPECT_FALSE(reply.drain());
  EXPECT_EQ(MustReport(policy, MakeReport("s_worst", -5.0, 2, 1), 20).migrate_size(), 0);
  EXPECT_EQ(MustReport(policy, MakeReport("d_best", 100.0, 2, 1), 20).migrate_size(), 0);
  EXPECT_EQ(policy.Summary(20).num_migration_orders, 1);
}

TEST(ManagerPolicyTest, PairingOrdersOnlyMovesThatNarrowTheGap) {
  // Source: freeness 2 over a batch of 2; destination: freeness 40 over a batch of 100.
  ManagerPolicy policy(Options(), 1);
  MustReport(policy, MakeReport("src", 2.0, 2, 4), 0);
  MustReport(policy, MakeReport("dst", 40.0, 100, 1), 0);
  // Moving 4 blocks: src (4 + 4) / 1 = 8, dst (4000 - 4) / 101 = 39.6; gap 38 -> 31.6.
  EXPECT_EQ(policy.Pair(0), 1);
  // Moving 100 blocks: src 104, dst 38.6 (still above 10), but the gap grows 38 -> 65.4.
  MustReport(policy, MakeReport("src", 2.0, 2, 100), 10);
  EXPECT_EQ(policy.Pair(10), 0);
  EXPECT_EQ(policy.PendingOrder("src"), nullptr);
}

TEST(ManagerPolicyTest, PairingKeepsTheDestinationAboveItsThreshold) {
  // src (0 * 4 + 12) / 3 = 4, dst (20 - 12) / 2 = 4: the gap closes (20 -> 0), but the
  // destination would fall to 4, below migrate_in_above (10).
  ManagerPolicy policy(Options(), 1);
  MustReport(policy, MakeReport("src", 0.0, 4, 12), 0);
  MustReport(policy, MakeReport("dst", 20.0, 1, 1), 0);
  EXPECT_EQ(policy.Pair(0), 0);
  // A smaller request fits: src (0 + 2) / 3 = 0.67, dst (20 - 2) / 2 = 9 -> still below 10.
  MustReport(policy, MakeReport("src", 0.0, 4, 2), 0);
  EXPECT_EQ(policy.Pair(0), 0);
  // With a freer destination it goes: dst (30 - 2) / 2 = 14.
  MustReport(policy, MakeReport("dst", 30.0, 1, 1), 0);
  EXPECT_EQ(policy.Pair(0), 1);
}

TEST(ManagerPolicyTest, PairingGivesAtMostOneOrderPerInstance) {
  // Thresholds that overlap (out below 50, in above 10): an instance at 20 qualifies for both
  // roles but is only ever a source.
  ManagerPolicyOptions o = Options();
  o.migrate_out_below = 50.0;
  ManagerPolicy policy(o, 1);
  MustReport(policy, MakeReport("a", 0.0, 4, 1), 0);
  MustReport(policy, MakeReport("b", 20.0, 4, 1), 0);
  MustReport(policy, MakeReport("c", 30.0, 4, 1), 0);
  MustReport(policy, MakeReport("d", 500.0, 4, 1), 0);
  EXPECT_EQ(policy.Pair(0), 1);
  const std::map<std::string, std::string> orders = Orders(policy, {"a", "b", "c", "d"});
  const std::map<std::string, std::string> expected = {{"a", "d"}};
  EXPECT_EQ(orders, expected);
  // No instance is a source and a destination in one round; each destination is used once.
  std::set<std::string> destinations;
  for (const auto& [src, dst] : orders) {
    EXPECT_EQ(orders.count(dst), 0u);
    EXPECT_TRUE(destinations.insert(dst).second);
  }
}

TEST(ManagerPolicyTest, PreemptedWaitingRequestsMakeASourceNeverADestination) {
  ManagerPolicy policy(Options(), 1);
  v1::InstanceReport preempted = MakeReport("p", 50.0, 4, 1);
  preempted.mutable_load()->set_num_preempted_waiting(2);
  MustReport(policy, preempted, 0);
  MustReport(policy, MakeReport("src", 0.0, 4, 1), 0);
  // The preempted instance (50) is a source, not a destination for src (0): nothing pairs.
  EXPECT_EQ(policy.Pair(0), 0);
  MustReport(policy, MakeReport("free", 200.0, 4, 1), 0);
  EXPECT_EQ(policy.Pair(0), 1);
  // Worst first: src (0) takes "free"; p waits for the next destination.
  ASSERT_NE(policy.PendingOrder("src"), nullptr);
  EXPECT_EQ(policy.PendingOrder("src")->destination_instance(), "free");
  EXPECT_EQ(policy.PendingOrder("p"), nullptr);
}

TEST(ManagerPolicyTest, ADispatchCountsAgainstItsInstanceUntilItReports) {
  ManagerPolicyOptions o = Options();
  o.dispatch_top_k = 1;
  ManagerPolicy policy(o, 1);
  ReportAAndB(policy, 0);
  // A burst between two reports alternates instead of herding onto "a".
  std::vector<std::string> picks;
  for (int i = 0; i < 4; ++i) picks.push_back(policy.Dispatch(160, 0, 0).instance_id());
  EXPECT_EQ(picks, (std::vector<std::string>{"a", "b", "a", "b"}));
  // The next report replaces the estimate once it shows the requests taken in.
  v1::InstanceReport a = MakeReport("a", 40.0, 4, 1);
  a.mutable_load()->set_num_dispatched_in(2);
  MustReport(policy, a, 0);
  EXPECT_EQ(policy.Dispatch(160, 0, 0).instance_id(), "a");
}

TEST(ManagerPolicyTest, ADispatchCountsUntilTheInstanceShowsIt) {
  ManagerPolicyOptions o = Options();
  o.dispatch_top_k = 1;
  ManagerPolicy policy(o, 1);
  ReportAAndB(policy, 0);
  ASSERT_EQ(policy.Dispatch(160, 0, 0).instance_id(), "a");  // a: (160 - 10) / 5 = 30
  // a reports before the forwarded request reached its scheduler: still charged, so b is next.
  MustReport(policy, MakeReport("a", 40.0, 4, 1), 10);
  EXPECT_EQ(policy.Dispatch(160, 0, 10).instance_id(), "b");  // b: (144 - 10) / 5 = 26.8
  // a has taken its request in (one more waiting, counted by a itself): no double charge.
  v1::InstanceReport a = MakeReport("a", 30.0, 5, 1);
  a.mutable_load()->set_num_dispatched_in(1);
  MustReport(policy, a, 20);
  MustReport(policy, MakeReport("b", 36.0, 4, 1), 20);  // b's request is still on its way
  // a: 30 (its own report) > b: 26.8 (charged again on top of its report).
  EXPECT_EQ(policy.Dispatch(160, 0, 20).instance_id(), "a");

  // A dispatch that never arrives (its forward failed) stops counting after kPendingDispatchMs.
  o.instance_timeout_ms = 10 * kPendingDispatchMs;  // the instances stay registered meanwhile
  ManagerPolicy lost(o, 1);
  ReportAAndB(lost, 0);
  ASSERT_EQ(lost.Dispatch(160, 0, 0).instance_id(), "a");
  // Still charged at the limit: a 30 < b 36.
  ReportAAndB(lost, kPendingDispatchMs);
  ASSERT_EQ(lost.Dispatch(160, 0, kPendingDispatchMs).instance_id(), "b");
  // Past it, a's lost request no longer counts (40), while b's recent one does (26.8).
  ReportAAndB(lost, kPendingDispatchMs + 1);
  EXPECT_EQ(lost.Dispatch(160, 0, kPendingDispatchMs + 1).instance_id(), "a");
}

TEST(ManagerPolicyTest, ADispatchIntoADeficitCountsInBlocks) {
  ManagerPolicyOptions o = Options();
  o.dispatch_top_k = 1;
  ManagerPolicy policy(o, 1);
  // Both busy: "a" is 5 blocks short with 3 requests, "b" 20 blocks short with 26.
  v1::InstanceReport a = MakeReport("a", -5.0, 2, 1);
  a.mutable_load()->set_num_waiting(1);
  v1::InstanceReport b = MakeReport("b", -20.0, 16, 1);
  b.mutable_load()->set_num_waiting(10);
  MustReport(policy, a, 0);
  MustReport(policy, b, 0);
  // Each 160-token request adds 10 blocks to its instance's deficit, however many requests
  // already wait there: "a" takes two (-15, then -25) before "b" (-20) is the better place.
  std::vector<std::string> picks;
  for (int i = 0; i < 3; ++i) picks.push_back(policy.Dispatch(160, 0, 0).instance_id());
  EXPECT_EQ(picks, (std::vector<std::string>{"a", "a", "b"}));
}

TEST(ManagerPolicyTest, WithoutMigrationOnlyDrainsMoveRequests) {
  ManagerPolicyOptions o = Options();
  o.migration = false;
  ManagerPolicy policy(o, 1);
  MustReport(policy, MakeReport("src", 0.0, 4, 1), 0);
  MustReport(policy, MakeReport("free", 200.0, 4, 1), 0);
  EXPECT_EQ(policy.Pair(0), 0);  // an overloaded instance is not a source
  EXPECT_EQ(policy.PendingOrder("src"), nullptr);
  ASSERT_TRUE(policy.Drain("src", 0).ok());
  EXPECT_EQ(policy.Pair(0), 1);  // a draining one still is, and "free" still takes it
  ASSERT_NE(policy.PendingOrder("src"), nullptr);
  EXPECT_EQ(policy.PendingOrder("src")->destination_instance(), "free");
}

TEST(ManagerPolicyTest, DrainingInstancesAlwaysMoveEverythingAndGetNothingNew) {
  ManagerPolicy policy(Options(), 1);
  v1::InstanceReport a = MakeReport("a", 500.0, 3, 900);  // a huge shortest request
  a.mutable_load()->set_num_waiting(1);
  MustReport(policy, a, 0);
  MustReport(policy, MakeReport("d", 20.0, 1, 1), 0);
  EXPECT_EQ(policy.Drain("nobody", 0).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(policy.Drain("a", 0).ok());
  ASSERT_TRUE(policy.Drain("a", 0).ok());  // idempotent
  EXPECT_EQ(policy.Dispatch(1, 0, 0).instance_id(), "d");
  // The gap rule would refuse this move; a draining source moves anyway, all it has.
  EXPECT_EQ(policy.Pair(0), 1);
  v1::ReportReply reply = MustReport(policy, a, 10);
  EXPECT_TRUE(reply.drain());
  ASSERT_EQ(reply.migrate_size(), 1);
  EXPECT_EQ(reply.migrate(0).destination_instance(), "d");
  EXPECT_EQ(reply.migrate(0).max_requests(), 4);
  // Orders keep coming every round until it is gone.
  EXPECT_EQ(policy.Pair(20), 1);
  EXPECT_EQ(MustReport(policy, a, 30).migrate_size(), 1);
  // A draining instance with nothing left gets no order, and a draining one is never a target.
  v1::InstanceReport empty = MakeReport("a", 500.0, 0, 0);
  empty.mutable_load()->set_num_running(0);
  MustReport(policy, empty, 40);
  EXPECT_EQ(policy.Pair(40), 0);
  ClusterSummary s = policy.Summary(40);
  EXPECT_EQ(s.num_instances, 2);
  EXPECT_EQ(s.num_draining, 1);
  EXPECT_DOUBLE_EQ(s.average_freeness, 20.0);  // d only
}

TEST(ManagerPolicyTest, AnOrderToADestinationThatWentAwayIsNotDelivered) {
  ManagerPolicy policy(Options(), 1);
  MustReport(policy, MakeReport("src", 0.0, 2, 1), 0);
  MustReport(policy, MakeReport("dst", 100.0, 2, 1), 0);
  EXPECT_EQ(policy.Pair(0), 1);
  ASSERT_TRUE(policy.Drain("dst", 0).ok());
  EXPECT_EQ(MustReport(policy, MakeReport("src", 0.0, 2, 1), 10).migrate_size(), 0);
  EXPECT_EQ(policy.Summary(10).num_migration_orders, 0);
}

TEST(ManagerPolicyTest, ScaleSignalsWithHysteresis) {
  // Empty cluster: no signal.
  ManagerPolicy empty(Options(), 1);
  EXPECT_EQ(empty.Summary(0).scale_signal, ScaleSignal::kNone);

  // Average 4 < 5: scale out.
  ManagerPolicy loaded(Options(), 1);
  MustReport(loaded, MakeReport("a", 2.0, 4), 0);
  MustReport(loaded, MakeReport("b", 6.0, 4), 0);
  EXPECT_EQ(loaded.Summary(0).scale_signal, ScaleSignal::kScaleOut);
  EXPECT_DOUBLE_EQ(loaded.Summary(0).average_freeness, 4.0);

  // Average 100 > 60, but without one of them (its 1000 - 200 = 800 load blocks and batch of 2
  // on the other) the other would be at (200 - 800) / 4 = -150: keep both.
  ManagerPolicy busy_enough(Options(), 1);
  MustReport(busy_enough, MakeReport("a", 100.0, 2), 0);
  MustReport(busy_enough, MakeReport("b", 100.0, 2), 0);
  ClusterSummary s = busy_enough.Summary(0);
  EXPECT_DOUBLE_EQ(s.average_freeness, 100.0);
  EXPECT_DOUBLE_EQ(s.average_freeness_one_fewer, -150.0);
  EXPECT_EQ(s.scale_signal, ScaleSignal::kNone);

  // Nearly idle: without one, the other is at (900 - 100) / 2 = 400 > 60: scale in.
  ManagerPolicy idle(Options(), 1);
  MustReport(idle, MakeReport("a", 900.0, 1), 0);
  MustReport(idle, MakeReport("b", 900.0, 1), 0);
  s = idle.Summary(0);
  EXPECT_DOUBLE_EQ(s.average_freeness_one_fewer, 400.0);
  EXPECT_EQ(s.scale_signal, ScaleSignal::kScaleIn);

  // Never below one instance, however idle.
  ManagerPolicy single(Options(), 1);
  MustReport(single, MakeReport("a", kInf, 0), 0);
  EXPECT_EQ(single.Summary(0).scale_signal, ScaleSignal::kNone);

  // Only draining instances left: capacity is going away.
  ASSERT_TRUE(single.Drain("a", 0).ok());
  EXPECT_EQ(single.Summary(0).scale_signal, ScaleSignal::kScaleOut);
}

TEST(ManagerPolicyTest, InfinitiesNeverReachAnAverage) {
  ManagerPolicy policy(Options(), 1);
  v1::InstanceReport draining = MakeReport("a", -kInf, 2, 1);
  draining.mutable_load()->set_draining(true);
  draining.mutable_load()->set_dispatch_freeness(-kInf);
  MustReport(policy, draining, 0);
  MustReport(policy, MakeReport("b", 30.0, 2), 0);
  MustReport(policy, MakeReport("idle", kInf, 0), 0);
  ClusterSummary s = policy.Summary(0);
  EXPECT_EQ(s.num_draining, 1);
  EXPECT_TRUE(std::isfinite(s.average_freeness));
  EXPECT_TRUE(std::isfinite(s.average_freeness_one_fewer));
  EXPECT_DOUBLE_EQ(s.average_freeness, (30.0 + kFreenessLimit) / 2);
  // The draining instance (-inf) moves to the idle one (+inf), the best destination.
  EXPECT_EQ(policy.Pair(0), 1);
  ASSERT_NE(policy.PendingOrder("a"), nullptr);
  EXPECT_EQ(policy.PendingOrder("a")->destination_instance(), "idle");
}

TEST(ManagerPolicyTest, SignConventionHigherIsLessLoaded) {
  // -infinity without the draining flag still means "move everything off me".
  ManagerPolicy policy(Options(), 1);
  v1::InstanceReport minus_inf = MakeReport("m", -kInf, 5, 50);
  MustReport(policy, minus_inf, 0);
  MustReport(policy, MakeReport("dst", 20.0, 1, 1), 0);
  EXPECT_EQ(policy.Pair(0), 1);
  EXPECT_EQ(policy.PendingOrder("m")->max_requests(), 5);
  // Higher freeness is where new work goes.
  ManagerPolicyOptions o = Options();
  o.dispatch_top_k = 1;
  ManagerPolicy ranked(o, 1);
  MustReport(ranked, MakeReport("low", 4.0), 0);
  MustReport(ranked, MakeReport("high", 8.0), 0);
  EXPECT_EQ(ranked.Dispatch(1, 0, 0).instance_id(), "high");
}

TEST(ManagerPolicyTest, FreenessEstimatesAfterAMove) {
  // Source: (2 * 4 + 6) / 3; destination: (10 * 2 - 6) / 3.
  EXPECT_DOUBLE_EQ(FreenessAfterMoveOut(2.0, 4, 6), 14.0 / 3);
  EXPECT_DOUBLE_EQ(FreenessAfterMoveIn(10.0, 2, 6), 14.0 / 3);
  // A batch of one (or none) counts as one.
  EXPECT_DOUBLE_EQ(FreenessAfterMoveOut(5.0, 1, 3), 8.0);
  EXPECT_DOUBLE_EQ(FreenessAfterMoveIn(5.0, 0, 3), 2.0);
  EXPECT_TRUE(std::isfinite(FreenessAfterMoveOut(-kInf, 3, 1)));
  EXPECT_DOUBLE_EQ(ClampFreeness(kInf), kFreenessLimit);
  EXPECT_DOUBLE_EQ(ClampFreeness(-kInf), -kFreenessLimit);
  EXPECT_DOUBLE_EQ(ClampFreeness(std::nan("")), 0.0);
}

}  // namespace
}  // namespace loom::cluster
