// The destination side of the internal cluster API (proto/loom/v1/cluster.proto, service
// Instance): reservations, block imports and Resume, which installs a migrated (or forwarded)
// request and streams its outputs back to the instance holding the client. Plus MigrateOut, the
// operator's (and tests') way to move requests off this instance now.
//
// Every scheduler change runs on the engine loop thread at a step boundary (loop_call.h); the
// handlers only wait for it, bounded by migration_timeout_ms. Bounded: at most
// migration_max_in_flight reservations at once; a reservation with no call for
// reservation_timeout_ms is freed (its source died). Peers are authenticated like clients when
// the server has API keys (`authorization: Bearer KEY`).
//
// Thread safety: gRPC's synchronous handlers, any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "loom/v1/cluster.grpc.pb.h"
#include "server/serving/serving_context.h"

namespace loom::cluster {

class Migrator;

class InstanceService final : public v1::Instance::Service {
 public:
  InstanceService(ServingContext& context, Migrator& migrator);
  ~InstanceService() override;  // stops the reservation watchdog

  grpc::Status Reserve(grpc::ServerContext* call, const v1::ReserveRequest* in,
                       v1::ReserveResponse* out) override;
  grpc::Status PushBlocks(grpc::ServerContext* call, const v1::PushBlocksRequest* in,
                          v1::PushBlocksResponse* out) override;
  grpc::Status Release(grpc::ServerContext* call, const v1::ReleaseRequest* in,
                       v1::ReleaseResponse* out) override;
  grpc::Status Resume(grpc::ServerContext* call, const v1::ResumeRequest* in,
                      grpc::ServerWriter<v1::RemoteOutput>* writer) override;
  grpc::Status MigrateOut(grpc::ServerContext* call, const v1::MigrateOutRequest* in,
                          v1::MigrateOutResponse* out) override;

 private:
  grpc::Status Authorize(const grpc::ServerContext& call) const;
  void ExpireReservations();
  // Every few hundred milliseconds while reservations are open: frees those whose source went
  // silent (no call for reservation_timeout_ms).
  void Watchdog();
  void Forget(uint64_t reservation);

  ServingContext& ctx_;
  Migrator& migrator_;
  std::mutex mu_;
  // Open reservations and when each was last used, for the in-flight bound.
  absl::flat_hash_map<uint64_t, int64_t> reservations_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace loom::cluster
