// An instance's membership in a cluster (shared/ARCHITECTURE.md §6): every
// cluster_report_interval_ms it reports its load (scheduler/load.h) to the manager, and carries
// out the manager's orders from the reply — migrate requests to another instance (on a worker
// thread, one order at a time), or drain (report draining, so the manager moves everything off).
// Without a manager, or while it is unreachable, the instance serves on its own as before.
//
// Thread safety: Start/Stop from the owner; the rest runs on its own threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "loom/v1/cluster.grpc.pb.h"
#include "server/cluster/migrator.h"
#include "server/serving/serving_context.h"

namespace loom::cluster {

class ClusterAgent {
 public:
  // `grpc_address`: where other instances reach this one; `http_address` for listings.
  ClusterAgent(ServingContext& context, Migrator& migrator, std::string instance_id,
               std::string grpc_address, std::string http_address);
  ~ClusterAgent();  // Stop()

  void Start();
  void Stop();

  // ServingContext::submit in a cluster: asks the manager where a new request should run (with
  // a short deadline) and forwards it there, or runs it here when the answer is here, there is
  // no answer, or the request cannot move (several choices, prompt log-probabilities).
  std::shared_ptr<RequestStream> Submit(SchedRequest request);

  // The load report as sent (for tests and metrics).
  v1::InstanceLoad CurrentLoad();
  bool manager_reachable() const { return manager_reachable_.load(); }

 private:
  void ReportLoop();
  void WorkLoop();

  ServingContext& ctx_;
  Migrator& migrator_;
  const std::string instance_id_, grpc_address_, http_address_;
  std::unique_ptr<v1::Manager::Stub> manager_;
  std::atomic<bool> manager_reachable_{false};
  std::atomic<bool> drain_ordered_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<v1::MigrateOrder> orders_;  // waiting for the worker
  std::thread reporter_, worker_;
};

}  // namespace loom::cluster
