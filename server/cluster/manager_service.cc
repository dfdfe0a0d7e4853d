#include "server/cluster/manager_service.h"

#include <chrono>
#include <string>
#include <utility>

#include "engine/common/logging.h"
#include "server/api/api_status.h"
#include "server/cluster/cluster_auth.h"

namespace loom::cluster {
namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(api::GrpcCodeFor(status.code())),
                      std::string(status.message()));
}

}  // namespace

ManagerService::ManagerService(const ManagerPolicyOptions& options, uint64_t seed,
                               std::function<int64_t()> now_ms, std::vector<std::string> api_keys)
    : now_ms_(std::move(now_ms)), api_keys_(std::move(api_keys)), policy_(options, seed) {}

ManagerService::~ManagerService() { StopPairing(); }

void ManagerService::StartPairing(int64_t interval_ms) {
  LOOM_CHECK(!pairing_thread_.joinable(), "StartPairing called twice");
  pairing_thread_ = std::thread([this, interval_ms] {
    std::unique_lock<std::mutex> lock(pairing_mu_);
    while (!pairing_cv_.wait_for(lock, std::chrono::milliseconds(interval_ms),
                                 [this] { return stopping_; })) {
      lock.unlock();
      PairNow();
      lock.lock();
    }
  });
}

void ManagerService::StopPairing() {
  {
    std::lock_guard<std::mutex> lock(pairing_mu_);
    stopping_ = true;
  }
  pairing_cv_.notify_all();
  if (pairing_thread_.joinable()) pairing_thread_.join();
}

int32_t ManagerService::PairNow() {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_.Pair(now_ms_());
}

grpc::Status ManagerService::Report(grpc::ServerContext* call, const v1::InstanceReport* request,
                                    v1::ReportReply* reply) {
  if (grpc::Status a = AuthorizeClusterCall(*call, api_keys_); !a.ok()) return a;
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<v1::ReportReply> answer = policy_.Report(*request, now_ms_());
  if (!answer.ok()) return ToGrpc(answer.status());
  *reply = std::move(*answer);
  return grpc::Status::OK;
}

grpc::Status ManagerService::Dispatch(grpc::ServerContext* call,
                                      const v1::DispatchRequest* request,
                                      v1::DispatchReply* reply) {
  if (grpc::Status a = AuthorizeClusterCall(*call, api_keys_); !a.ok()) return a;
  std::lock_guard<std::mutex> lock(mu_);
  *reply = policy_.Dispatch(request->prompt_tokens(), request->priority(), now_ms_());
  return grpc::Status::OK;
}

grpc::Status ManagerService::Drain(grpc::ServerContext* call, const v1::DrainRequest* request,
                                   v1::DrainReply* reply) {
  if (grpc::Status a = AuthorizeClusterCall(*call, api_keys_); !a.ok()) return a;
  const absl::Status status = DrainInstance(request->instance_id());
  reply->set_ok(status.ok());
  if (!status.ok()) reply->set_reason(std::string(status.message()));
  return grpc::Status::OK;
}

grpc::Status ManagerService::ListInstances(grpc::ServerContext* call,
                                           const v1::ListInstancesRequest*,
                                           v1::ListInstancesReply* reply) {
  if (grpc::Status a = AuthorizeClusterCall(*call, api_keys_); !a.ok()) return a;
  *reply = List();
  return grpc::Status::OK;
}

absl::Status ManagerService::DrainInstance(std::string_view instance_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Status status = policy_.Drain(instance_id, now_ms_());
  if (status.ok()) LOOM_LOG(kInfo, "draining instance ", instance_id);
  return status;
}

v1::ListInstancesReply ManagerService::List() {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_.List(now_ms_());
}

ClusterSummary ManagerService::Summary() {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_.Summary(now_ms_());
}

}  // namespace loom::cluster
