// Scheduler: the cluster side — load reports, and both ends of a live migration
// (shared/ARCHITECTURE.md §6). The migration protocol itself runs elsewhere
// (server/cluster/); here are the state changes it asks for, each at a step boundary.
#include <algorithm>
#include <limits>

#include "engine/common/logging.h"
#include "engine/common/strings.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_state.h"

namespace loom {
namespace {

int32_t BlocksFor(int64_t tokens, int32_t block_size) {
  return static_cast<int32_t>((tokens + block_size - 1) / block_size);
}

}  // namespace

LoadReport Scheduler::Load(bool draining, int32_t high_priority_below,
                           double priority_headroom_fraction) const {
  const int32_t bs = pool_.block_size();
  LoadInputs in;
  in.num_blocks = pool_.num_blocks();
  in.num_free_blocks = pool_.num_free();
  in.num_running = static_cast<int32_t>(running_.size());
  in.num_waiting = static_cast<int32_t>(waiting_.size());
  in.priority_headroom_fraction = priority_headroom_fraction;
  in.draining = draining;
  for (const Seq* seq : waiting_) {
    // Its whole demand: the tokens it holds now plus what it may still generate.
    const int64_t tokens = static_cast<int64_t>(seq->tokens.size()) +
                           std::max(0, seq->req->params.max_new_tokens - seq->num_generated());
    const int32_t blocks = BlocksFor(tokens, bs);
    if (in.head_of_line_blocks == 0) in.head_of_line_blocks = blocks;
    if (seq->req->admitted && seq->index == 0 && seq->num_generated() > 0) {
      ++in.num_preempted_waiting;
    }
    in.waiting_blocks += blocks;
  }
  for (const Seq* seq : running_) {
    if (seq->req->params.priority < high_priority_below) in.has_high_priority = true;
  }
  return ComputeLoad(in);
}

std::vector<RequestId> Scheduler::MovableRequests() const {
  std::vector<RequestId> ids;
  for (const auto& [id, req] : requests_) {
    if (req->params.n != 1 || req->migrating) continue;
    const Seq& seq = *req->seqs.front();
    if (seq.state == Seq::State::kFinished || seq.state == Seq::State::kFrozen) continue;
    if (seq.ScoresPrompt()) continue;
    ids.push_back(id);
  }
  return ids;
}

std::optional<std::pair<RequestId, int32_t>> Scheduler::ShortestMovableRequest(
    bool longest) const {
  std::optional<std::pair<RequestId, int32_t>> best;
  for (const Seq* seq : running_) {
    const Req& req = *seq->req;
    if (req.params.n != 1 || req.migrating || seq->ScoresPrompt() || !seq->known) continue;
    if (seq->num_computed < seq->num_prompt) continue;  // prefill: let it finish the prompt
    const int32_t blocks = static_cast<int32_t>(seq->blocks.size());
    if (!best || (longest ? blocks > best->second : blocks < best->second)) {
      best.emplace(req.params.id, blocks);
    }
  }
  return best;
}

Scheduler::Seq* Scheduler::MovableSeq(RequestId id, absl::Status* why) {
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    *why = absl::NotFoundError(StrCat("request ", id, " is not here (it finished)"));
    return nullptr;
  }
  Req& req = *it->second;
  if (req.params.n != 1) {
    *why = absl::FailedPreconditionError("requests with several choices do not migrate");
    return nullptr;
  }
  Seq& seq = *req.seqs.front();
  if (seq.state == Seq::State::kFinished) {
    *why = absl::NotFoundError(StrCat("request ", id, " finished"));
    return nullptr;
  }
  if (seq.ScoresPrompt()) {
    *why = absl::FailedPreconditionError(
        "a request still reporting prompt log-probabilities does not migrate");
    return nullptr;
  }
  return &seq;
}

absl::Status Scheduler::BeginMigrateOut(RequestId id) {
  absl::Status why;
  Seq* seq = MovableSeq(id, &why);
  if (seq == nullptr) return why;
  if (seq->req->migrating) {
    return absl::FailedPreconditionError(StrCat("request ", id, " is already migrating"));
  }
  seq->req->migrating = true;
  seq->req->migrating_from = seq->known ? seq->id : SequenceId(0);
  return absl::OkStatus();
}

absl::StatusOr<MigrationExport> Scheduler::ExportForMigration(RequestId id, int32_t first_block,
                                                              bool freeze, int32_t max_blocks) {
  absl::Status why;
  Seq* seq = MovableSeq(id, &why);
  if (seq == nullptr) return why;
  Req& req = *seq->req;
  if (!req.migrating) {
    return absl::FailedPreconditionError(StrCat("request ", id, " is not migrating"));
  }
  const SequenceId current = seq->known ? seq->id : SequenceId(0);
  if (current != req.migrating_from || seq->state == Seq::State::kFrozen) {
    // Preempted (or admitted) since the migration began: the blocks sent so far are stale.
    return absl::AbortedError(StrCat("request ", id, " was rescheduled during its migration"));
  }
  const int32_t bs = pool_.block_size();
  MigrationExport out;
  out.seq_id = current;
  out.first_block = first_block;
  const bool running = seq->state == Seq::State::kRunning;
  int32_t total = !running ? 0
                  : freeze ? BlocksFor(seq->num_computed, bs)
                           : seq->num_computed / bs;
  if (!freeze && max_blocks > 0) total = std::min(total, std::max(first_block, 0) + max_blocks);
  out.total_blocks = total;
  out.num_blocks = std::max(0, total - first_block);
  if (first_block > total) {
    return absl::InternalError(StrCat("migration of request ", id, " sent ", first_block,
                                      " blocks of ", total));
  }
  if (freeze) {
    seq->frozen_waiting = !running;
    if (running) {
      Erase(running_, seq);
    } else {
      Erase(waiting_, seq);
    }
    seq->state = Seq::State::kFrozen;
    frozen_.push_back(seq);
    out.state.params = req.params;
    out.state.tokens = seq->tokens;
    out.state.num_computed = running ? seq->num_computed : 0;
    out.state.num_cached_tokens = seq->num_cached_tokens;
  }
  if (out.num_blocks > 0 || (freeze && seq->known)) {
    KvExport e;
    e.blocks.assign(seq->blocks.begin() + first_block, seq->blocks.begin() + total);
    if (freeze && seq->known) e.tail_of = seq->id;
    e.out = std::make_shared<KvBlob>();
    out.blob = e.out;
    pending_exports_.push_back(std::move(e));
  }
  return out;
}

void Scheduler::CommitMigrateOut(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Seq& seq = *it->second->seqs.front();
  if (seq.state != Seq::State::kFrozen) return;
  Release(seq);
  Erase(frozen_, &seq);
  seq.state = Seq::State::kFinished;
  MarkAdmitted(*seq.req);
  EndRequestExperts(id);  // what it routed here still describes a request
  requests_.erase(it);  // no output: the destination reports from now on
}

void Scheduler::CancelMigrateOut(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Req& req = *it->second;
  req.migrating = false;
  Seq& seq = *req.seqs.front();
  if (seq.state != Seq::State::kFrozen) return;
  Erase(frozen_, &seq);
  if (seq.frozen_waiting) {
    InsertWaiting(&seq);
  } else {
    InsertRunning(&seq);
  }
}

absl::StatusOr<uint64_t> Scheduler::Reserve(uint64_t reservation, int32_t num_blocks,
                                            int64_t now_ms) {
  if (num_blocks < 0) return absl::InvalidArgumentError("negative block count");
  Reservation* r = nullptr;
  if (reservation == 0) {
    reservation = next_reservation_++;
    r = &reservations_[reservation];
  } else {
    auto it = reservations_.find(reservation);
    if (it == reservations_.end()) {
      return absl::NotFoundError(StrCat("reservation ", reservation, " is unknown (expired?)"));
    }
    r = &it->second;
  }
  r->last_used_ms = now_ms;
  if (!pool_.Allocate(num_blocks, &r->blocks)) {
    return absl::ResourceExhaustedError(StrCat("only ", pool_.num_free(), " blocks are free; ",
                                               num_blocks, " were asked for"));
  }
  return reservation;
}

int32_t Scheduler::ReservedBlocks(uint64_t reservation) const {
  auto it = reservations_.find(reservation);
  return it == reservations_.end() ? 0 : static_cast<int32_t>(it->second.blocks.size());
}

absl::Status Scheduler::ImportForMigration(uint64_t reservation, int32_t first_block,
                                           std::shared_ptr<const KvBlob> blob, int64_t now_ms) {
  auto it = reservations_.find(reservation);
  if (it == reservations_.end()) {
    return absl::NotFoundError(StrCat("reservation ", reservation, " is unknown (expired?)"));
  }
  Reservation& r = it->second;
  r.last_used_ms = now_ms;
  if (blob == nullptr || first_block < 0 ||
      first_block + blob->num_blocks > static_cast<int32_t>(r.blocks.size())) {
    return absl::InvalidArgumentError(
        StrCat("blocks [", first_block, ", ", first_block + (blob ? blob->num_blocks : 0),
               ") are outside the reservation of ", r.blocks.size()));
  }
  if (blob->num_blocks == 0) return absl::OkStatus();
  KvImport im;
  im.blocks.assign(r.blocks.begin() + first_block,
                   r.blocks.begin() + first_block + blob->num_blocks);
  im.data = std::move(blob);
  pending_imports_.push_back(std::move(im));
  return absl::OkStatus();
}

void Scheduler::ReleaseReservation(uint64_t reservation) {
  auto it = reservations_.find(reservation);
  if (it == reservations_.end()) return;
  pool_.Release(it->second.blocks);
  reservations_.erase(it);
}

void Scheduler::ExpireReservations(int64_t older_than_ms) {
  std::vector<uint64_t> expired;
  for (const auto& [id, r] : reservations_) {
    if (r.last_used_ms < older_than_ms) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    LOOM_LOG(kWarning, "reservation ", id, " expired (its migration's source went silent)");
    ReleaseReservation(id);
  }
}

absl::Status Scheduler::ResumeMigrated(RequestId id, uint64_t reservation,
                                       const MigrantState& state,
                                       std::shared_ptr<const KvBlob> tail,
                                       std::shared_ptr<const KvBlob> last_blocks,
                                       int32_t last_first_block) {
  const SchedRequest& p = state.params;
  const int32_t len = static_cast<int32_t>(state.tokens.size());
  const int32_t num_prompt = static_cast<int32_t>(p.prompt.size());
  if (p.n != 1 || num_prompt == 0 || len < num_prompt || p.max_new_tokens < 0 ||
      state.num_computed < 0 || state.num_computed >= std::max(len, 1)) {
    return absl::InvalidArgumentError("the migrated request's state is inconsistent");
  }
  if (int64_t{num_prompt} + p.max_new_tokens > model_.max_context_len) {
    return absl::InvalidArgumentError("the migrated request exceeds this model's context");
  }
  for (TokenId t : state.tokens) {
    if (t.value() < 0 || t.value() >= model_.vocab_size) {
      return absl::InvalidArgumentError(StrCat("token id ", t, " is outside the vocabulary"));
    }
  }
  if (requests_.contains(id)) {
    return absl::InvalidArgumentError(StrCat("request id ", id, " is already here"));
  }
  const int32_t bs = pool_.block_size();
  const int32_t need = BlocksFor(state.num_computed, bs);
  Reservation r;
  if (reservation != 0) {
    auto it = reservations_.find(reservation);
    if (it == reservations_.end()) {
      return absl::NotFoundError(StrCat("reservation ", reservation, " is unknown (expired?)"));
    }
    r = std::move(it->second);
    reservations_.erase(it);
  }
  const int32_t num_last = last_blocks != nullptr ? last_blocks->num_blocks : 0;
  if (static_cast<int32_t>(r.blocks.size()) < need ||
      (state.num_computed > 0 && static_cast<int32_t>(running_.size()) >= config_.max_num_seqs) ||
      (num_last > 0 && (last_first_block < 0 || last_first_block + num_last > need))) {
    pool_.Release(r.blocks);
    if (static_cast<int32_t>(r.blocks.size()) < need) {
      return absl::InvalidArgumentError(StrCat("the request computed ", state.num_computed,
                                               " tokens; ", r.blocks.size(), " blocks were filled"));
    }
    if (num_last > 0 && (last_first_block < 0 || last_first_block + num_last > need)) {
      return absl::InvalidArgumentError(
          StrCat("final blocks [", last_first_block, ", ", last_first_block + num_last,
                 ") are outside the ", need, " blocks the request fills"));
    }
    return absl::ResourceExhaustedError("this instance runs its most sequences already");
  }
  if (num_last > 0) {
    KvImport im;
    im.blocks.assign(r.blocks.begin() + last_first_block,
                     r.blocks.begin() + last_first_block + num_last);
    im.data = std::move(last_blocks);
    pending_imports_.push_back(std::move(im));
  }
  // Blocks beyond the computed ones go back (the scheduler allocates as it grows).
  pool_.Release(std::vector<BlockId>(r.blocks.begin() + need, r.blocks.end()));
  r.blocks.resize(need);

  auto req = std::make_unique<Req>();
  req->params = p;
  req->params.id = id;
  req->arrival = next_arrival_++;
  req->admitted = true;
  req->prompt_ready = state.num_computed >= num_prompt;
  Seq* seq = NewSeq(*req, 0);
  seq->tokens = state.tokens;
  seq->num_cached_tokens = state.num_cached_tokens;
  seq->num_prompt_logprobs = std::max(0, num_prompt - 1);  // never re-reported here
  if (state.num_computed == 0) {
    InsertWaiting(seq);  // moves without KV: computes everything, like a preempted request
  } else {
    seq->blocks = std::move(r.blocks);
    seq->num_computed = state.num_computed;
    seq->imported_tail = std::move(tail);
    seq->known = false;
    InsertRunning(seq);
    // The full blocks enter this instance's prefix cache as they would have if computed here.
    RegisterFullBlocks(*seq);
  }
  requests_.emplace(id, std::move(req));
  return absl::OkStatus();
}

}  // namespace loom
