// The source side of live migration (shared/ARCHITECTURE.md §6, Llumnix's multi-stage pre-copy)
// and the relays that carry a moved request's outputs back to its client's stream.
//
// One migration, driven from a caller's thread:
//   1. Begin (on the loop): the request is marked; a preemption from now on aborts the move.
//   2. Pre-copy stages: the request's full computed blocks not yet sent are exported at the next
//      step (it keeps decoding meanwhile), blocks are reserved on the destination and pushed.
//      Once a stage's delta is at most migration_last_stage_blocks (or after
//      migration_max_stages - 1 stages), the next stage is the last.
//   3. Last stage: the request is frozen at a step boundary (its outputs so far are published),
//      the remaining blocks and the residual tail are exported, pushed, and Resume is called.
//   4. Commit: when the destination answers `accepted`, the source ends its copy (no output) and
//      hands the client's stream to a relay, which pushes the destination's outputs into it.
// Bounded: one migration out at a time, its staging buffer bounded; each committed move or
// forward holds a relay thread until the request ends, at most max_relays of them (at the limit a
// move is aborted before it begins and a forward runs here).
// Exactly one owner: before the commit, every failure (destination full or gone, timeouts, the
// request finishing or being preempted) cancels the move — the source unfreezes the request, and
// the destination's reservation is released (or expires). After it, the destination runs it; if
// the destination dies, the client's stream ends with a clear error; if the client goes away, the
// relay's call is cancelled and the destination aborts the request.
//
// Thread safety: MigrateOut and OnAbort from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/security/credentials.h>

#include "absl/container/flat_hash_map.h"
#include "loom/v1/cluster.grpc.pb.h"
#include "scheduler/scheduler.h"
#include "server/serving/serving_context.h"

namespace loom::cluster {

struct MigrationOutcome {
  RequestId request_id;
  std::string outcome;  // committed | aborted (still here) | failed (ended with an error)
  std::string reason;
  int32_t stages = 0;
  int32_t blocks_copied = 0;
  // From the freeze to the first output the destination sent (or its acceptance when the
  // request had nothing more to say); the request's downtime.
  double downtime_ms = 0;
  // The downtime's parts: the freeze to the end of the source's step that exported the rest;
  // from there to the destination's acceptance (the final copy, the Resume call, the import);
  // from the acceptance to the first output (the destination's first step).
  double export_step_ms = 0;
  double resume_ms = 0;
  double first_output_ms = 0;
};

class Migrator {
 public:
  // `credentials`: of the calls to other instances (ClusterChannelCredentials); null =
  // plaintext.
  Migrator(ServingContext& context, std::string instance_id,
           std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
  ~Migrator();  // cancels every relay and waits for them

  // Moves up to `max_requests` (0 = all) movable requests to the instance at `address`, one at
  // a time, shortest first (longest first with `longest_first`) — or exactly `only` when given.
  // Returns one outcome per attempt.
  std::vector<MigrationOutcome> MigrateOut(const std::string& address, int32_t max_requests,
                                           std::optional<RequestId> only,
                                           bool longest_first = false);
  // Runs a new request on the instance at `address` (the manager's dispatch) and relays its
  // outputs into `stream`; when that instance does not accept it, or max_relays relays already
  // run, it runs here instead. Returns at once (a relay thread does the rest).
  void Forward(SchedRequest request, const std::string& address,
               std::shared_ptr<RequestStream> stream);
  int64_t num_forwarded() const { return forwarded_.load(); }

  // The engine loop's abort listener: a request relayed from elsewhere is cancelled there.
  void OnAbort(RequestId id);

  // The name this instance gives itself in request keys and to destinations; the cluster
  // agent sets the one it reports under once the gRPC port is known.
  void SetInstanceId(std::string instance_id);
  std::string instance_id() const;

  int32_t num_in_flight() const { return in_flight_.load(); }
  const std::shared_ptr<grpc::ChannelCredentials>& credentials() const { return credentials_; }
  int32_t num_relays() const;
  // Cumulative outcomes.
  int64_t num_committed() const { return committed_.load(); }
  int64_t num_aborted() const { return aborted_.load(); }
  int64_t num_failed() const { return failed_.load(); }

 private:
  struct Relay;
  // One migration's copy so far: where its blocks go and how many have gone.
  struct Transfer {
    RequestId id;
    const v1::KvLayout& layout;
    v1::Instance::Stub& stub;
    uint64_t reservation = 0;
    int32_t reserved = 0;  // blocks held by the reservation
    int32_t sent = 0;      // leading blocks of the request copied
    int32_t blocks_copied = 0;
    // The client's stream once a last-stage export has taken it from the loop. Read and written
    // on the loop thread only: an abort posted after an export that answered too late (and so
    // was never seen here) still finds the stream and gives it back.
    std::shared_ptr<std::shared_ptr<RequestStream>> detached =
        std::make_shared<std::shared_ptr<RequestStream>>();
  };
  // One export (on the loop) with the reservation and pushes it needs.
  struct Round {
    MigrationExport ex;
    std::string error;      // non-empty: the move must stop
    bool finished = false;  // the request ended meanwhile
    bool froze = false;     // the request is frozen (a last-stage export was planned)
    // Frozen: the client's stream, taken from the loop (null if the client already left).
    std::shared_ptr<RequestStream> stream;
    // Frozen: when the loop froze the request (its last output here was published before).
    std::chrono::steady_clock::time_point frozen_at;
    // When the loop's step that exported this round ended.
    std::chrono::steady_clock::time_point exported_at;
    // Frozen and few: the blocks were not pushed; they ride in the Resume call, for reservation
    // slots from `deferred_first_block` on.
    bool deferred = false;
    int32_t deferred_first_block = 0;
  };
  Round CopyRound(Transfer& t, bool freeze, int32_t cap);
  MigrationOutcome MigrateOne(RequestId id, const std::string& address,
                              v1::Instance::Stub& stub);
  void RunRelay(Relay& relay);
  // True when max_relays relay threads run (mu_ held): new moves and forwards are refused.
  bool RelaysFull() const;
  std::string RelayLimitReason() const;
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address);
  void AddAuth(grpc::ClientContext& call) const;
  // Best effort: gives a destination's block reservation back (it also expires on its own).
  void ReleaseReservation(v1::Instance::Stub& stub, uint64_t reservation, int64_t timeout_ms) const;

  ServingContext& ctx_;
  std::string instance_id_;  // guarded by mu_
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::atomic<int32_t> in_flight_{0};
  std::atomic<int64_t> committed_{0}, aborted_{0}, failed_{0}, forwarded_{0};
  std::mutex migrate_mu_;  // one migration out at a time (bounded stages and buffers)
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_;
  absl::flat_hash_map<RequestId, std::shared_ptr<Relay>> relays_;
  int32_t active_threads_ = 0;  // relay threads still running
  std::condition_variable done_cv_;
  bool stopping_ = false;
};

}  // namespace loom::cluster
