#include "server/cluster/instance_service.h"

#include <algorithm>
#include <string>

#include "engine/common/logging.h"
#include "engine/common/strings.h"
#include "server/cluster/cluster_auth.h"
#include "server/cluster/loop_call.h"
#include "server/cluster/migrator.h"
#include "server/cluster/wire.h"

namespace loom::cluster {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace

InstanceService::InstanceService(ServingContext& context, Migrator& migrator)
    : ctx_(context), migrator_(migrator), watchdog_([this] { Watchdog(); }) {}

InstanceService::~InstanceService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
}

void InstanceService::Watchdog() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [&] { return stopping_; })) {
    if (reservations_.empty()) continue;
    const int64_t stale = ctx_.now_ms() - ctx_.config.reservation_timeout_ms;
    std::vector<uint64_t> expired;
    for (const auto& [id, last] : reservations_) {
      if (last < stale) expired.push_back(id);
    }
    for (uint64_t id : expired) reservations_.erase(id);
    if (expired.empty()) continue;
    lock.unlock();
    ExpireReservations();
    lock.lock();
  }
}

grpc::Status InstanceService::Authorize(const grpc::ServerContext& call) const {
  return AuthorizeClusterCall(call, ctx_.config.api_keys);
}

void InstanceService::ExpireReservations() {
  const int64_t older_than = ctx_.now_ms() - ctx_.config.reservation_timeout_ms;
  ctx_.engine->Post([older_than](LoopAccess& loop) {
    loop.scheduler().ExpireReservations(older_than);
  });
}

void InstanceService::Forget(uint64_t reservation) {
  std::lock_guard<std::mutex> lock(mu_);
  reservations_.erase(reservation);
}

grpc::Status InstanceService::Reserve(grpc::ServerContext* call, const v1::ReserveRequest* in,
                                      v1::ReserveResponse* out) {
  if (grpc::Status a = Authorize(*call); !a.ok()) return a;
  ExpireReservations();
  auto refuse = [&](std::string reason) {
    out->set_ok(false);
    out->set_reason(std::move(reason));
    return grpc::Status::OK;
  };
  if (in->layout().layout() != ctx_.capacity.kv_layout ||
      in->layout().block_size() != ctx_.capacity.block_size) {
    return refuse(StrCat("KV layouts differ: this instance holds ", ctx_.capacity.kv_layout,
                         ", the source ", in->layout().layout()));
  }
  if (ctx_.draining.load()) return refuse("this instance is draining");
  if (in->num_blocks() < 0 || in->num_blocks() > ctx_.capacity.num_blocks) {
    return refuse(StrCat("cannot reserve ", in->num_blocks(), " blocks"));
  }
  if (in->reservation_id() == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t stale = ctx_.now_ms() - ctx_.config.reservation_timeout_ms;
    absl::erase_if(reservations_, [&](const auto& entry) { return entry.second < stale; });
    if (static_cast<int64_t>(reservations_.size()) >= ctx_.config.migration_max_in_flight) {
      return refuse("too many migrations into this instance at once");
    }
  }
  const uint64_t id = in->reservation_id();
  const int32_t n = in->num_blocks();
  std::optional<absl::StatusOr<uint64_t>> r = CallOnLoop<absl::StatusOr<uint64_t>>(
      *ctx_.engine, ctx_.config.migration_timeout_ms,
      [id, n](LoopAccess& loop, std::function<void(absl::StatusOr<uint64_t>)> reply) {
        reply(loop.scheduler().Reserve(id, n, loop.now_ms()));
      });
  if (!r.has_value()) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "engine busy");
  if (!r->ok()) return refuse(std::string(r->status().message()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    reservations_[**r] = ctx_.now_ms();
  }
  const uint64_t rid = **r;
  std::optional<int32_t> held = CallOnLoop<int32_t>(
      *ctx_.engine, ctx_.config.migration_timeout_ms,
      [rid](LoopAccess& loop, std::function<void(int32_t)> reply) {
        reply(loop.scheduler().ReservedBlocks(rid));
      });
  out->set_ok(true);
  out->set_reservation_id(rid);
  out->set_num_reserved_blocks(held.value_or(0));
  return grpc::Status::OK;
}

grpc::Status InstanceService::PushBlocks(grpc::ServerContext* call,
                                         const v1::PushBlocksRequest* in,
                                         v1::PushBlocksResponse* out) {
  if (grpc::Status a = Authorize(*call); !a.ok()) return a;
  const int64_t per_block = ctx_.capacity.bytes_per_block;
  if (in->num_blocks() <= 0 || in->first_block() < 0 ||
      static_cast<int64_t>(in->blocks().size()) != in->num_blocks() * per_block) {
    out->set_ok(false);
    out->set_reason(StrCat("expected ", in->num_blocks(), " blocks of ", per_block, " bytes, got ",
                           in->blocks().size(), " bytes"));
    return grpc::Status::OK;
  }
  auto blob = std::make_shared<KvBlob>();
  blob->layout = ctx_.capacity.kv_layout;
  blob->num_blocks = in->num_blocks();
  blob->blocks.assign(in->blocks().begin(), in->blocks().end());
  const uint64_t rid = in->reservation_id();
  const int32_t first = in->first_block();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reservations_.find(rid);
    if (it != reservations_.end()) it->second = ctx_.now_ms();
  }
  std::optional<absl::Status> done = CallOnLoop<absl::Status>(
      *ctx_.engine, ctx_.config.migration_timeout_ms,
      [rid, first, blob](LoopAccess& loop, std::function<void(absl::Status)> reply) {
        absl::Status s = loop.scheduler().ImportForMigration(rid, first, blob, loop.now_ms());
        if (!s.ok()) {
          reply(s);
          return;
        }
        loop.AfterNextStep([reply](bool ok) {
          reply(ok ? absl::OkStatus() : absl::InternalError("the import step failed"));
        });
      });
  if (!done.has_value()) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "engine busy");
  out->set_ok(done->ok());
  out->set_reason(std::string(done->message()));
  return grpc::Status::OK;
}

grpc::Status InstanceService::Release(grpc::ServerContext* call, const v1::ReleaseRequest* in,
                                      v1::ReleaseResponse*) {
  if (grpc::Status a = Authorize(*call); !a.ok()) return a;
  const uint64_t rid = in->reservation_id();
  ctx_.engine->Post([rid](LoopAccess& loop) { loop.scheduler().ReleaseReservation(rid); });
  Forget(rid);
  return grpc::Status::OK;
}

grpc::Status InstanceService::Resume(grpc::ServerContext* call, const v1::ResumeRequest* in,
                                     grpc::ServerWriter<v1::RemoteOutput>* writer) {
  if (grpc::Status a = Authorize(*call); !a.ok()) return a;
  const uint64_t rid = in->reservation_id();
  absl::StatusOr<MigrantState> state =
      MigrantFromProto(*in, ctx_.model.vocab_size, ctx_.now_ms());
  if (state.ok() && rid != 0 &&
      (in->layout().layout() != ctx_.capacity.kv_layout ||
       in->layout().block_size() != ctx_.capacity.block_size)) {
    state = absl::InvalidArgumentError("KV layouts differ");
  }
  if (!state.ok()) {
    if (rid != 0) {
      ctx_.engine->Post([rid](LoopAccess& loop) { loop.scheduler().ReleaseReservation(rid); });
      Forget(rid);
    }
    return ToGrpc(state.status());
  }
  if (ctx_.draining.load()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this instance is draining");
  }
  // A tail of the wrong size would make the engine refuse the whole step it joins.
  const bool tail_expected = ctx_.capacity.tail_slot_bytes > 0 && in->num_computed_tokens() > 0;
  if (tail_expected
          ? static_cast<int64_t>(in->kv_tail().size()) != ctx_.capacity.tail_slot_bytes ||
                in->kv_tail_first_block() < 0 ||
                in->kv_tail_first_block() >
                    in->num_computed_tokens() / std::max(ctx_.capacity.block_size, 1)
          : !in->kv_tail().empty()) {
    if (rid != 0) {
      ctx_.engine->Post([rid](LoopAccess& loop) { loop.scheduler().ReleaseReservation(rid); });
      Forget(rid);
    }
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        StrCat("the residual tail has ", in->kv_tail().size(), " bytes; ",
                               tail_expected ? ctx_.capacity.tail_slot_bytes : 0,
                               " were expected"));
  }
  std::shared_ptr<const KvBlob> last_blocks;
  if (in->final_num_blocks() != 0 || !in->final_blocks().empty()) {
    const int64_t per_block = ctx_.capacity.bytes_per_block;
    if (rid == 0 || in->final_num_blocks() <= 0 || in->final_first_block() < 0 ||
        static_cast<int64_t>(in->final_blocks().size()) != in->final_num_blocks() * per_block) {
      ctx_.engine->Post([rid](LoopAccess& loop) { loop.scheduler().ReleaseReservation(rid); });
      Forget(rid);
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          StrCat("expected ", in->final_num_blocks(), " final blocks of ",
                                 per_block, " bytes, got ", in->final_blocks().size(), " bytes"));
    }
    auto blob = std::make_shared<KvBlob>();
    blob->layout = ctx_.capacity.kv_layout;
    blob->num_blocks = in->final_num_blocks();
    blob->blocks.assign(in->final_blocks().begin(), in->final_blocks().end());
    last_blocks = std::move(blob);
  }
  std::shared_ptr<const KvBlob> tail;
  if (!in->kv_tail().empty()) {
    auto blob = std::make_shared<KvBlob>();
    blob->layout = ctx_.capacity.kv_layout;
    blob->tail.assign(in->kv_tail().begin(), in->kv_tail().end());
    blob->tail_first_block = in->kv_tail_first_block();
    tail = std::move(blob);
  }
  const RequestId id(ctx_.next_request_id.fetch_add(1));
  auto stream = std::make_shared<RequestStream>(id, 1);
  MigrantState migrant = *std::move(state);
  std::optional<absl::Status> installed = CallOnLoop<absl::Status>(
      *ctx_.engine, ctx_.config.migration_timeout_ms,
      [id, rid, migrant, tail, last_blocks, first = in->final_first_block(), stream,
       counter = in->dispatched() ? &ctx_.num_dispatched_in : nullptr](
          LoopAccess& loop, std::function<void(absl::Status)> reply) {
        absl::Status s =
            loop.scheduler().ResumeMigrated(id, rid, migrant, tail, last_blocks, first);
        if (s.ok()) {
          loop.AttachStream(id, stream, 1);
          if (counter != nullptr) ++*counter;
        }
        reply(s);
      });
  Forget(rid);
  if (!installed.has_value()) {
    // The loop may still install it; make sure it ends if it does.
    ctx_.engine->Abort(id);
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "engine busy");
  }
  if (!installed->ok()) return ToGrpc(*installed);
  LOOM_LOG(kInfo, "request ", in->request_key(), " from ", in->source_instance(),
           " runs here as ", id, " (", migrant.num_computed, " tokens of K/V moved)");
  ctx_.num_inflight_responses.fetch_add(1);
  v1::RemoteOutput first;
  first.set_accepted(true);
  bool open = writer->Write(first);
  while (open) {
    if (call->IsCancelled()) {
      open = false;
      break;
    }
    StreamBatch batch = stream->Wait(absl::Milliseconds(100));
    for (const ChoiceOutput& out : batch.outputs) {
      v1::RemoteOutput msg;
      OutputToProto(out, &msg);
      if (!writer->Write(msg)) open = false;
    }
    if (batch.done) {
      if (!batch.error.ok()) {
        v1::RemoteOutput msg;
        msg.set_error(std::string(batch.error.message()));
        writer->Write(msg);
      }
      break;
    }
  }
  if (!open) ctx_.engine->Abort(id);  // the owner went away: nobody reads this request now
  ctx_.num_inflight_responses.fetch_sub(1);
  return grpc::Status::OK;
}

grpc::Status InstanceService::MigrateOut(grpc::ServerContext* call,
                                         const v1::MigrateOutRequest* in,
                                         v1::MigrateOutResponse* out) {
  if (grpc::Status a = Authorize(*call); !a.ok()) return a;
  if (in->destination_address().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "destination_address is empty");
  }
  std::vector<MigrationOutcome> results = migrator_.MigrateOut(
      in->destination_address(), in->max_requests(),
      in->request_id() == 0 ? std::nullopt : std::optional<RequestId>(RequestId(in->request_id())),
      in->longest_first());
  for (const MigrationOutcome& r : results) {
    v1::MigrationResult* m = out->add_results();
    m->set_request_id(r.request_id.value());
    m->set_outcome(r.outcome);
    m->set_reason(r.reason);
    m->set_stages(r.stages);
    m->set_blocks_copied(r.blocks_copied);
    m->set_downtime_ms(r.downtime_ms);
    m->set_export_step_ms(r.export_step_ms);
    m->set_resume_ms(r.resume_ms);
    m->set_first_output_ms(r.first_output_ms);
  }
  return grpc::Status::OK;
}

}  // namespace loom::cluster
