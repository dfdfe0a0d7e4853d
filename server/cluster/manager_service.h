// The cluster manager's gRPC service (proto/loom/v1/cluster.proto `Manager`) over one
// ManagerPolicy, and the background thread that pairs instances for migration every pair
// interval (and so also drops silent ones). The HTTP routes (manager_http.h) reach the same
// policy through the methods below.
//
// Thread safety: every method may be called from any thread; one mutex serializes all access
// to the policy (each call is short: a table of at most kMaxInstances entries). Start/Stop of
// the background thread from the owner only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "loom/v1/cluster.grpc.pb.h"
#include "server/cluster/manager_policy.h"

namespace loom::cluster {

class ManagerService final : public v1::Manager::Service {
 public:
  // `now_ms` is a monotonic clock in milliseconds; `seed` seeds dispatch's random choice. With
  // `api_keys`, every gRPC method needs one of them (cluster_auth.h).
  ManagerService(const ManagerPolicyOptions& options, uint64_t seed,
                 std::function<int64_t()> now_ms, std::vector<std::string> api_keys = {});
  ~ManagerService() override;  // StopPairing()

  // Runs Pair every `interval_ms` on a thread of its own until StopPairing.
  void StartPairing(int64_t interval_ms);
  void StopPairing();

  // The gRPC methods. Invalid reports are INVALID_ARGUMENT; Drain of an unknown id answers
  // ok = false with the reason (the call itself succeeds); without a valid key (when the
  // manager has keys) each is UNAUTHENTICATED.
  grpc::Status Report(grpc::ServerContext* context, const v1::InstanceReport* request,
                      v1::ReportReply* reply) override;
  grpc::Status Dispatch(grpc::ServerContext* context, const v1::DispatchRequest* request,
                        v1::DispatchReply* reply) override;
  grpc::Status Drain(grpc::ServerContext* context, const v1::DrainRequest* request,
                     v1::DrainReply* reply) override;
  grpc::Status ListInstances(grpc::ServerContext* context,
                             const v1::ListInstancesRequest* request,
                             v1::ListInstancesReply* reply) override;

  // The same for the HTTP routes. DrainInstance: NotFound for an unknown id.
  absl::Status DrainInstance(std::string_view instance_id);
  v1::ListInstancesReply List();
  ClusterSummary Summary();
  // One pairing round now (the background thread's work; tests call it directly).
  int32_t PairNow();

 private:
  std::function<int64_t()> now_ms_;
  const std::vector<std::string> api_keys_;
  std::mutex mu_;
  ManagerPolicy policy_;  // guarded by mu_

  std::mutex pairing_mu_;
  std::condition_variable pairing_cv_;
  bool stopping_ = false;  // guarded by pairing_mu_
  std::thread pairing_thread_;
};

}  // namespace loom::cluster
