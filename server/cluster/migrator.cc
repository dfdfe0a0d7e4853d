#include "server/cluster/migrator.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "engine/common/logging.h"
#include "engine/common/strings.h"
#include "server/cluster/cluster_auth.h"
#include "server/cluster/loop_call.h"
#include "server/cluster/wire.h"

namespace loom::cluster {
namespace {

// Bytes per PushBlocks message: under gRPC's default 4 MiB message limit.
constexpr int64_t kMaxPushBytes = int64_t{2} << 20;
// Bytes one pre-copy round exports and holds at once (a stage may take several rounds). A round
// is copied inside one step of the source's loop, which every running request waits for: at
// 64 MiB a 2K-4K-token request's first round paused the loop for 50-240 ms (fresh memory faulted
// in page by page); at 8 MiB the longest pause other requests saw was 20-40 ms against a 13-20 ms
// step (bench/results/cluster.md).
constexpr int64_t kMaxStageBytes = int64_t{8} << 20;

double MsBetween(std::chrono::steady_clock::time_point from,
                 std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

double MsSince(std::chrono::steady_clock::time_point t) {
  return MsBetween(t, std::chrono::steady_clock::now());
}

}  // namespace

// A moved request's outputs on their way back: the Resume call and the client's stream.
struct Migrator::Relay {
  RequestId id;
  grpc::ClientContext call;
  std::unique_ptr<grpc::ClientReader<v1::RemoteOutput>> reader;
  Answer<bool> accepted;                         // the first message arrived (or the call ended)
  Answer<std::shared_ptr<RequestStream>> stream;  // null: the move was called off
  Answer<bool> first_output;
  std::atomic<bool> client_gone{false};
  bool forward = false;  // a new request forwarded by dispatch, counted when accepted
};

Migrator::Migrator(ServingContext& context, std::string instance_id,
                   std::shared_ptr<grpc::ChannelCredentials> credentials)
    : ctx_(context),
      instance_id_(std::move(instance_id)),
      credentials_(credentials != nullptr ? std::move(credentials)
                                          : grpc::InsecureChannelCredentials()) {}

Migrator::~Migrator() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  for (auto& [id, relay] : relays_) {
    relay->call.TryCancel();
    relay->stream.Set(nullptr);
  }
  done_cv_.wait(lock, [&] { return active_threads_ == 0; });
}

void Migrator::SetInstanceId(std::string instance_id) {
  std::lock_guard<std::mutex> lock(mu_);
  instance_id_ = std::move(instance_id);
}

std::string Migrator::instance_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return instance_id_;
}

int32_t Migrator::num_relays() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(relays_.size());
}

void Migrator::AddAuth(grpc::ClientContext& call) const {
  AddClusterAuth(call, ctx_.config.api_keys);
}

std::shared_ptr<grpc::Channel> Migrator::ChannelTo(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel =
      grpc::CreateCustomChannel(address, credentials_, args);
  channels_.emplace(address, channel);
  return channel;
}

void Migrator::ReleaseReservation(v1::Instance::Stub& stub, uint64_t reservation,
                                  int64_t timeout_ms) const {
  grpc::ClientContext call;
  AddAuth(call);
  call.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  v1::ReleaseRequest rel;
  rel.set_reservation_id(reservation);
  v1::ReleaseResponse ignored;
  (void)stub.Release(&call, rel, &ignored);
}

void Migrator::OnAbort(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = relays_.find(id);
  if (it == relays_.end()) return;
  it->second->client_gone = true;
  it->second->call.TryCancel();
}

std::vector<MigrationOutcome> Migrator::MigrateOut(const std::string& address,
                                                   int32_t max_requests,
                                                   std::optional<RequestId> only,
                                                   bool longest_first) {
  std::lock_guard<std::mutex> one_at_a_time(migrate_mu_);
  std::vector<MigrationOutcome> results;
  auto stub = v1::Instance::NewStub(ChannelTo(address));
  std::vector<RequestId> tried;
  for (;;) {
    if (max_requests > 0 && static_cast<int32_t>(results.size()) >= max_requests) break;
    std::optional<RequestId> next = only;
    if (!only.has_value()) {
      // The shortest running request first (least to copy), then waiting ones.
      std::optional<std::optional<RequestId>> pick = CallOnLoop<std::optional<RequestId>>(
          *ctx_.engine, ctx_.config.migration_timeout_ms,
          [tried, longest_first](LoopAccess& loop,
                                 std::function<void(std::optional<RequestId>)> reply) {
            std::vector<RequestId> ids = loop.scheduler().MovableRequests();
            auto shortest = loop.scheduler().ShortestMovableRequest(longest_first);
            std::optional<RequestId> best;
            if (shortest && std::find(tried.begin(), tried.end(), shortest->first) == tried.end()) {
              best = shortest->first;
            }
            for (RequestId id : ids) {
              if (best) break;
              if (std::find(tried.begin(), tried.end(), id) == tried.end()) best = id;
            }
            reply(best);
          });
      if (!pick.has_value() || !pick->has_value()) break;
      next = **pick;
    }
    tried.push_back(*next);
    ++in_flight_;
    MigrationOutcome r = MigrateOne(*next, address, *stub);
    --in_flight_;
    if (r.outcome == "committed") {
      ++committed_;
    } else if (r.outcome == "failed") {
      ++failed_;
    } else {
      ++aborted_;
    }
    if (ctx_.metrics != nullptr) ctx_.metrics->ObserveMigration(r.outcome, r.downtime_ms / 1e3);
    LOOM_LOG(kInfo, "migration of request ", r.request_id, " to ", address, ": ", r.outcome,
             r.reason.empty() ? "" : " (", r.reason, r.reason.empty() ? "" : ")", ", ",
             r.stages, " stages, ", r.blocks_copied, " blocks, downtime ", r.downtime_ms,
             " ms (export step ", r.export_step_ms, ", resume ", r.resume_ms, ", first output ",
             r.first_output_ms, ")");
    results.push_back(std::move(r));
    if (only.has_value()) break;
  }
  return results;
}

// Reads the destination's outputs into the client's stream until the request ends there.
void Migrator::RunRelay(Relay& relay) {
  v1::RemoteOutput msg;
  if (!relay.reader->Read(&msg) || !msg.accepted()) {
    relay.accepted.Set(false);
    (void)relay.reader->Finish();
    return;
  }
  relay.accepted.Set(true);
  if (relay.forward) {
    // Counted before any output reaches the client, so a client that has seen its stream end
    // also sees the counter.
    ++forwarded_;
    if (ctx_.metrics != nullptr) ctx_.metrics->ObserveForwarded();
  }
  // Wait for the source to commit (or call the move off).
  std::optional<std::shared_ptr<RequestStream>> stream;
  while (!(stream = relay.stream.Wait(1000)).has_value()) {
  }
  if (*stream == nullptr) {
    relay.call.TryCancel();
    (void)relay.reader->Finish();
    return;
  }
  bool finished = false;
  while (relay.reader->Read(&msg)) {
    relay.first_output.Set(true);
    if (!msg.error().empty()) {
      (*stream)->Fail(absl::InternalError(
          StrCat("the request failed on the instance it migrated to: ", msg.error())));
      finished = true;
      break;
    }
    ChoiceOutput out = OutputFromProto(msg, relay.id);
    finished = out.finish != FinishReason::kNone;
    (*stream)->Push(std::move(out));
    if (finished) break;
  }
  relay.first_output.Set(true);
  const grpc::Status status = relay.reader->Finish();
  if (!finished) {
    if (relay.client_gone.load()) {
      ChoiceOutput out;
      out.request_id = relay.id;
      out.finish = FinishReason::kAbort;
      (*stream)->Push(std::move(out));
    } else {
      (*stream)->Fail(absl::UnavailableError(
          StrCat("the instance running this request (after a migration) stopped: ",
                 status.error_message())));
    }
  }
}

bool Migrator::RelaysFull() const {
  return ctx_.config.max_relays > 0 && active_threads_ >= ctx_.config.max_relays;
}

std::string Migrator::RelayLimitReason() const {
  return StrCat("the relay limit (max_relays = ", ctx_.config.max_relays, ") is reached");
}

void Migrator::Forward(SchedRequest request, const std::string& address,
                       std::shared_ptr<RequestStream> stream) {
  MigrantState state;
  state.params = request;
  state.tokens = request.prompt;
  v1::ResumeRequest resume;
  MigrantToProto(state, &resume);
  const std::string self = instance_id();
  resume.set_request_key(StrCat(self, "/", request.id.value()));
  resume.set_source_instance(self);
  resume.set_dispatched(true);
  if (request.deadline_ms > 0) {
    resume.set_deadline_remaining_ms(std::max<int64_t>(1, request.deadline_ms - ctx_.now_ms()));
  }
  auto relay = std::make_shared<Relay>();
  relay->id = request.id;
  relay->forward = true;
  AddAuth(relay->call);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || RelaysFull()) {
      ctx_.engine->SubmitTo(std::move(request), std::move(stream));
      return;
    }
    relays_[relay->id] = relay;
    ++active_threads_;
  }
  auto stub = v1::Instance::NewStub(ChannelTo(address));
  relay->reader = stub->Resume(&relay->call, resume);
  std::thread([this, relay, request = std::move(request), stream = std::move(stream),
               address]() mutable {
    // The stream is this request's from the start: the relay needs no commit.
    relay->stream.Set(stream);
    RunRelay(*relay);
    const bool accepted = relay->accepted.Wait(0).value_or(false);
    if (!accepted && !relay->client_gone.load()) {
      LOOM_LOG(kWarning, "request ", request.id, " could not run at ", address,
               "; running it here");
      ctx_.engine->SubmitTo(std::move(request), std::move(stream));
    }
    std::lock_guard<std::mutex> lock(mu_);
    relays_.erase(relay->id);
    --active_threads_;
    done_cv_.notify_all();
  }).detach();
}

Migrator::Round Migrator::CopyRound(Transfer& t, bool freeze, int32_t cap) {
  Round round;
  const int64_t timeout = ctx_.config.migration_timeout_ms;
  const RequestId id = t.id;
  const int32_t sent = t.sent;
  struct Exported {
    absl::StatusOr<MigrationExport> ex;
    bool step_ok = false;
    std::shared_ptr<RequestStream> stream;
    std::chrono::steady_clock::time_point frozen_at;
  };
  std::optional<Exported> got = CallOnLoop<Exported>(
      *ctx_.engine, timeout,
      [id, sent, freeze, cap, detached = t.detached](LoopAccess& a,
                                                     std::function<void(Exported)> reply) {
        absl::StatusOr<MigrationExport> e = a.scheduler().ExportForMigration(id, sent, freeze, cap);
        if (!e.ok()) {
          reply(Exported{std::move(e), false, nullptr, {}});
          return;
        }
        const auto frozen_at = std::chrono::steady_clock::now();
        // Frozen, the request publishes nothing more here: its stream leaves the loop now, so
        // that the destination's first output reaches the client without waiting for a step
        // boundary of this instance. An abort puts it back.
        std::shared_ptr<RequestStream> stream = freeze ? a.DetachStream(id) : nullptr;
        if (freeze) *detached = stream;
        a.AfterNextStep([e, reply, stream, frozen_at](bool ok) {
          reply(Exported{e, ok, stream, frozen_at});
        });
      });
  if (!got.has_value()) {
    round.error = "the engine loop did not answer";
    return round;
  }
  if (!got->ex.ok()) {
    round.finished = got->ex.status().code() == absl::StatusCode::kNotFound;
    round.error = std::string(got->ex.status().message());
    return round;
  }
  round.froze = freeze;
  round.frozen_at = got->frozen_at;
  round.exported_at = std::chrono::steady_clock::now();
  round.stream = std::move(got->stream);
  round.ex = *std::move(got->ex);
  const MigrationExport& ex = round.ex;
  if (!got->step_ok) {
    round.error = "the export step failed";
    return round;
  }
  if (ex.blob != nullptr && ex.num_blocks > 0 && ex.blob->layout.empty()) {
    round.error = "the request was preempted during the export";
    return round;
  }
  // Reserve what this round needs, then push its blocks.
  if (ex.total_blocks > t.reserved) {
    grpc::ClientContext call;
    AddAuth(call);
    call.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout));
    v1::ReserveRequest req;
    *req.mutable_layout() = t.layout;
    req.set_reservation_id(t.reservation);
    req.set_num_blocks(ex.total_blocks - t.reserved);
    req.set_source_instance(instance_id());
    v1::ReserveResponse resp;
    grpc::Status s = t.stub.Reserve(&call, req, &resp);
    if (!s.ok()) {
      round.error = StrCat("reserve: ", s.error_message());
      return round;
    }
    if (!resp.ok()) {
      round.error = StrCat("the destination refused: ", resp.reason());
      return round;
    }
    t.reservation = resp.reservation_id();
    t.reserved = ex.total_blocks;
  }
  const int64_t per_block = ctx_.capacity.bytes_per_block;
  if (freeze && ex.num_blocks > 0 && int64_t{ex.num_blocks} * per_block <= kMaxPushBytes) {
    // The frozen remainder fits one message: it rides in the Resume call, so the destination
    // imports it and installs the request in one pass of its loop.
    round.deferred = true;
    round.deferred_first_block = t.sent;
    t.blocks_copied += ex.num_blocks;
    t.sent = ex.total_blocks;
    return round;
  }
  const int32_t chunk = static_cast<int32_t>(std::max<int64_t>(1, kMaxPushBytes / per_block));
  for (int32_t b = 0; b < ex.num_blocks; b += chunk) {
    const int32_t n = std::min(chunk, ex.num_blocks - b);
    grpc::ClientContext call;
    AddAuth(call);
    call.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout));
    v1::PushBlocksRequest req;
    req.set_reservation_id(t.reservation);
    req.set_first_block(t.sent + b);
    req.set_num_blocks(n);
    req.set_blocks(ex.blob->blocks.data() + b * per_block, static_cast<size_t>(n * per_block));
    v1::PushBlocksResponse resp;
    grpc::Status s = t.stub.PushBlocks(&call, req, &resp);
    if (!s.ok()) {
      round.error = StrCat("push: ", s.error_message());
      return round;
    }
    if (!resp.ok()) {
      round.error = StrCat("the destination could not import: ", resp.reason());
      return round;
    }
    t.blocks_copied += n;
  }
  t.sent = ex.total_blocks;
  return round;
}

MigrationOutcome Migrator::MigrateOne(RequestId id, const std::string& address,
                                      v1::Instance::Stub& stub) {
  MigrationOutcome result;
  result.request_id = id;
  const int64_t timeout = ctx_.config.migration_timeout_ms;
  EngineLoop& loop = *ctx_.engine;
  v1::KvLayout layout;
  layout.set_layout(ctx_.capacity.kv_layout);
  layout.set_block_size(ctx_.capacity.block_size);
  Transfer t{id, layout, stub};
  bool frozen = false;
  // The client's stream once the request is frozen (the loop no longer holds it; an abort finds
  // it in t.detached, which also covers an export whose answer came too late).
  std::shared_ptr<RequestStream> stream;
  // Registered from the start, so that a client leaving mid-move is seen (OnAbort).
  auto relay = std::make_shared<Relay>();
  relay->id = id;
  AddAuth(relay->call);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || relays_.contains(id) || RelaysFull()) {
      result.outcome = "aborted";
      if (stopping_) {
        result.reason = "the server is stopping";
      } else if (relays_.contains(id)) {
        result.reason = "the request is already relayed";
      } else {
        result.reason = RelayLimitReason();
      }
      return result;
    }
    relays_[id] = relay;
  }
  auto forget_relay = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = relays_.find(id);
    if (it != relays_.end() && it->second == relay) relays_.erase(it);
  };
  // Before the commit every failure ends here: the request stays (or is put back) here.
  auto abort = [&](std::string reason) {
    forget_relay();
    // Unfreezes a frozen request (giving its stream back to the loop); clears the mark of one
    // that kept running. A request that ended while frozen (its client left) gets its end.
    // Commands run in order, so any export posted before this one has run by then.
    loop.Post([id, detached = t.detached](LoopAccess& a) {
      std::shared_ptr<RequestStream> stream = std::exchange(*detached, nullptr);
      if (stream != nullptr) {
        if (a.scheduler().Contains(id)) {
          a.AttachStream(id, stream, 1);
        } else {
          ChoiceOutput end;
          end.request_id = id;
          end.finish = FinishReason::kAbort;
          stream->Push(std::move(end));
        }
      }
      a.scheduler().CancelMigrateOut(id);
    });
    if (t.reservation != 0) ReleaseReservation(stub, t.reservation, timeout);
    result.outcome = "aborted";
    result.reason = std::move(reason);
    return result;
  };

  std::optional<absl::Status> begun = CallOnLoop<absl::Status>(
      loop, timeout, [id](LoopAccess& a, std::function<void(absl::Status)> reply) {
        reply(a.scheduler().BeginMigrateOut(id));
      });
  if (!begun.has_value()) return abort("the engine loop did not answer");
  if (!begun->ok()) {
    forget_relay();
    result.outcome = "aborted";
    result.reason = std::string(begun->message());
    return result;
  }

  bool last = false;
  std::chrono::steady_clock::time_point freeze_time;
  std::chrono::steady_clock::time_point exported_at;
  MigrationExport ex;
  bool deferred = false;
  int32_t deferred_first_block = 0;
  // The staging buffer: blocks exported (and held in memory) at once.
  const int32_t round_cap = static_cast<int32_t>(
      std::max<int64_t>(1, kMaxStageBytes / std::max<int64_t>(ctx_.capacity.bytes_per_block, 1)));
  for (int32_t stage = 0; !frozen; ++stage) {
    last = last || stage + 1 >= ctx_.config.migration_max_stages;
    int32_t stage_blocks = 0;
    // Rounds of at most round_cap blocks until this stage has caught up (the last stage takes
    // everything left at once: the request is frozen, nothing grows).
    for (bool more = true; more;) {
      const int32_t cap = last ? 0 : round_cap;
      Round round = CopyRound(t, last, cap);
      if (round.finished) {
        forget_relay();
        loop.Post([id](LoopAccess& a) { a.scheduler().CancelMigrateOut(id); });
        // Blocks reserved by an earlier round would stay held until the reservation expired.
        if (t.reservation != 0) ReleaseReservation(stub, t.reservation, timeout);
        result.outcome = "aborted";
        result.reason = "the request finished";
        return result;
      }
      frozen = frozen || round.froze;
      if (round.froze) {
        stream = std::move(round.stream);
        freeze_time = round.frozen_at;
        exported_at = round.exported_at;
        deferred = round.deferred;
        deferred_first_block = round.deferred_first_block;
      }
      if (!round.error.empty()) return abort(round.error);
      ex = std::move(round.ex);
      stage_blocks += ex.num_blocks;
      more = !frozen && cap > 0 && ex.num_blocks >= cap;
    }
    result.blocks_copied = t.blocks_copied;
    ++result.stages;
    if (!frozen && stage_blocks <= ctx_.config.migration_last_stage_blocks) last = true;
    LOOM_LOG(kInfo, "migration of request ", id, ": stage ", result.stages, frozen ? " (last)" : "",
             " sent ", stage_blocks, " blocks");
    if (ctx_.config.migration_stage_pause_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ctx_.config.migration_stage_pause_ms));
    }
  }

  // Commit: the destination installs the request and answers `accepted`.
  v1::ResumeRequest resume;
  MigrantToProto(ex.state, &resume);
  const std::string self = instance_id();
  resume.set_request_key(StrCat(self, "/", id.value()));
  resume.set_source_instance(self);
  resume.set_reservation_id(ex.state.num_computed > 0 ? t.reservation : 0);
  *resume.mutable_layout() = layout;
  if (ex.state.params.deadline_ms > 0) {
    resume.set_deadline_remaining_ms(
        std::max<int64_t>(1, ex.state.params.deadline_ms - ctx_.now_ms()));
  }
  if (ex.blob != nullptr && !ex.blob->tail.empty()) {
    resume.set_kv_tail(ex.blob->tail.data(), ex.blob->tail.size());
    resume.set_kv_tail_first_block(ex.blob->tail_first_block);
  }
  if (deferred && ex.blob != nullptr) {
    resume.set_final_blocks(ex.blob->blocks.data(),
                            static_cast<size_t>(ex.num_blocks * ctx_.capacity.bytes_per_block));
    resume.set_final_first_block(deferred_first_block);
    resume.set_final_num_blocks(ex.num_blocks);
  }
  if (ex.state.num_computed == 0 && t.reservation != 0) {
    // Moves without KV: the reservation is not needed.
    ReleaseReservation(stub, t.reservation, timeout);
    t.reservation = 0;
  }
  if (stream == nullptr || relay->client_gone.load()) {
    // The client left while the request was frozen: it ends here.
    return abort("the client went away");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return abort("the server is stopping");
    // A forward may have taken the last relay since the move began.
    if (RelaysFull()) return abort(RelayLimitReason());
    ++active_threads_;
  }
  relay->reader = stub.Resume(&relay->call, resume);
  std::thread([this, relay]() {
    RunRelay(*relay);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = relays_.find(relay->id);
    if (it != relays_.end() && it->second == relay) relays_.erase(it);
    --active_threads_;
    done_cv_.notify_all();
  }).detach();
  std::optional<bool> accepted = relay->accepted.Wait(timeout);
  if (!accepted.has_value() || !*accepted) {
    relay->call.TryCancel();  // if it was installed after all, the destination aborts it
    relay->stream.Set(nullptr);
    t.reservation = 0;  // consumed or released by the destination's Resume
    return abort(accepted.has_value() ? "the destination did not accept the request"
                                      : "the destination did not answer Resume in time");
  }
  // The destination runs it: the relay feeds the client's stream at once, and the source ends
  // its frozen copy at its next step boundary (no output: the destination reports now).
  const auto accepted_at = std::chrono::steady_clock::now();
  relay->stream.Set(stream);
  loop.Post([id](LoopAccess& a) { a.scheduler().CommitMigrateOut(id); });
  result.outcome = "committed";
  (void)relay->first_output.Wait(timeout);
  result.downtime_ms = MsSince(freeze_time);
  result.first_output_ms = MsSince(accepted_at);
  result.export_step_ms = MsBetween(freeze_time, exported_at);
  result.resume_ms = MsBetween(exported_at, accepted_at);
  return result;
}

}  // namespace loom::cluster
