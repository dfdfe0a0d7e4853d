#include "engine/runtime/local_executor.h"

#include <algorithm>
#include <chrono>

#include "absl/container/flat_hash_set.h"
#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

LocalExecutor::~LocalExecutor() = default;

absl::StatusOr<StepResult> LocalExecutor::Execute(const StepPlan& plan) {
  const auto start = std::chrono::steady_clock::now();
  backend_->BindThread();
  LOOM_RETURN_IF_ERROR(Validate(plan));
  Stage(plan);
  absl::StatusOr<StepResult> result = Run(plan, start);
  if (!result.ok()) {
    // Nothing was committed: every sequence is as it was before the plan (all or nothing).
    Unstage();
    return result.status();
  }
  Commit(plan, *result);
  return result;
}

absl::StatusOr<StepResult> LocalExecutor::Run(const StepPlan& plan,
                                              std::chrono::steady_clock::time_point start) {
  LOOM_RETURN_IF_ERROR(RunExports(plan));
  StepResult result;
  result.step_id = plan.step_id;
  result.outputs.resize(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) result.outputs[i].seq_id = entries_[i].seq_id;
  if (entries_.empty()) {
    // Block copies and imports are queued on the backend; they must land before the next step
    // reads them (and before the plan's import blobs may go away).
    if (!plan.block_copies.empty() || !plan.kv_imports.empty()) {
      LOOM_RETURN_IF_ERROR(backend_->Synchronize());
    }
    return result;
  }

  const int32_t graph_batch = GraphBatchSize();
  const StepBatch batch = BuildBatch(graph_batch);
  const int32_t num_padding = graph_batch > 0 ? graph_batch - int32_t(entries_.size()) : 0;
  result.num_tokens_computed = batch.num_tokens - num_padding;
  result.timings.prepare_ms = MillisSince(start);
  const auto forward_start = std::chrono::steady_clock::now();
  if (expert_store_ != nullptr) ApplyExpertHints(plan);
  LOOM_RETURN_IF_ERROR(model_->Forward(batch, *kv_, graph_batch > 0 ? graph_batch : -1));
  if (expert_store_ != nullptr) result.expert_cache = ExpertCounters();
  LOOM_RETURN_IF_ERROR(backend_->Synchronize());
  if (fault_injector_) LOOM_RETURN_IF_ERROR(fault_injector_(plan.step_id));
  if (plan.report_expert_routing && info_.num_experts > 0) CountExpertRouting(result.outputs);
  result.timings.forward_ms = MillisSince(forward_start);

  const auto sample_start = std::chrono::steady_clock::now();
  CollectLogitRequests();
  RunLogitRequests(result.outputs);
  LOOM_RETURN_IF_ERROR(backend_->Synchronize());
  result.timings.sample_ms = MillisSince(sample_start);
  return result;
}

int32_t LocalExecutor::GraphBatchSize() const {
  if (graph_batch_sizes_.empty()) return 0;
  for (const Entry& e : entries_) {
    if (e.num_scheduled != 1) return 0;
  }
  const auto it = std::lower_bound(graph_batch_sizes_.begin(), graph_batch_sizes_.end(),
                                   static_cast<int32_t>(entries_.size()));
  return it == graph_batch_sizes_.end() ? 0 : *it;
}

void LocalExecutor::Stage(const StepPlan& plan) {
  for (const BlockCopy& copy : plan.block_copies) kv_->CopyBlock(copy.src, copy.dst);
  for (const KvImport& import : plan.kv_imports) {
    kv_->ImportBlocks(import.blocks, import.data->blocks.data());
  }
  entries_.clear();
  staged_.clear();
  for (const NewSequencePlan& p : plan.new_sequences) {
    // Staged apart from sequences_: a new sequence may reuse the id of one this plan finishes.
    Sequence& seq = staged_[p.seq_id];
    seq.token_ids = p.token_ids;
    seq.num_prompt_tokens = p.num_prompt_tokens;
    for (BlockId block : p.block_table) seq.block_table.push_back(block.value());
    seq.num_computed_tokens = p.num_computed_tokens;
    seq.sampling = p.sampling;
    entries_.push_back({p.seq_id, &seq, p.num_scheduled_tokens, 0, -1});
  }
  for (const ContinuingSequencePlan& p : plan.continuing) {
    Sequence& seq = sequences_.find(p.seq_id)->second;
    const auto num_blocks = static_cast<int32_t>(seq.block_table.size());
    for (BlockId block : p.new_block_ids) seq.block_table.push_back(block.value());
    entries_.push_back({p.seq_id, &seq, p.num_scheduled_tokens, 0, num_blocks});
  }
  if (kv_->shape().num_tail_slots > 0) AssignTailSlots(plan);
}

absl::Status LocalExecutor::RunExports(const StepPlan& plan) {
  pending_exports_.clear();
  pending_exports_.resize(plan.kv_exports.size());
  for (size_t i = 0; i < plan.kv_exports.size(); ++i) {
    const KvExport& request = plan.kv_exports[i];
    KvBlob& blob = pending_exports_[i];
    blob.layout = capacity_.kv_layout;
    blob.num_blocks = static_cast<int32_t>(request.blocks.size());
    blob.blocks.resize(request.blocks.size() * static_cast<size_t>(capacity_.bytes_per_block));
    LOOM_RETURN_IF_ERROR(kv_->ExportBlocks(request.blocks, blob.blocks.data()));
    if (request.tail_of.value() == 0) continue;
    // Validated: a held sequence this plan does not finish. Element formats have no tail.
    const Sequence& seq = sequences_.find(request.tail_of)->second;
    if (seq.tail_slot < 0) continue;
    blob.tail.resize(static_cast<size_t>(kv_->shape().TailSlotBytes()));
    LOOM_RETURN_IF_ERROR(kv_->ExportTail(seq.tail_slot, blob.tail.data()));
    blob.tail_first_block = seq.tail_first_block;
  }
  return absl::OkStatus();
}

const LocalExecutor::Sequence* LocalExecutor::PartialBlockOwner(int32_t block) const {
  const int32_t bs = capacity_.block_size;
  for (const auto& [id, seq] : sequences_) {
    const int32_t n = seq.num_computed_tokens;
    if (n % bs != 0 && seq.block_table[n / bs] == block) return &seq;
  }
  return nullptr;
}

void LocalExecutor::AssignTailSlots(const StepPlan& plan) {
  // Slots held by the sequences that outlive this plan; the rest are free. (Validate checked
  // that there are enough.)
  std::vector<bool> used(kv_->shape().num_tail_slots, false);
  absl::flat_hash_set<SequenceId> finished(plan.finished.begin(), plan.finished.end());
  for (const auto& [id, seq] : sequences_) {
    if (!finished.contains(id)) used[seq.tail_slot] = true;
  }
  size_t next = 0;
  const int32_t bs = capacity_.block_size;
  for (const NewSequencePlan& p : plan.new_sequences) {
    while (used[next]) ++next;
    Sequence& seq = staged_[p.seq_id];
    seq.tail_slot = static_cast<int32_t>(next++);
    seq.tail_first_block = p.num_computed_tokens / bs;
    if (p.imported_tail != nullptr) {
      // Resumed from a KV transfer: the exporter's ring, and the first block it computed itself.
      kv_->ImportTail(seq.tail_slot, p.imported_tail->tail.data());
      seq.tail_first_block = p.imported_tail->tail_first_block;
      continue;
    }
    if (p.num_computed_tokens % bs == 0) continue;
    // A partial block that a block copy gave this sequence: its rows are in the source's tail.
    const int32_t block = seq.block_table[p.num_computed_tokens / bs];
    for (const BlockCopy& copy : plan.block_copies) {
      if (copy.dst.value() != block) continue;
      const Sequence* owner = PartialBlockOwner(copy.src.value());
      LOOM_CHECK(owner != nullptr, "validated block copy without a tail");
      if (owner->tail_slot != seq.tail_slot) kv_->CopyTail(owner->tail_slot, seq.tail_slot);
      break;
    }
  }
}

void LocalExecutor::Unstage() {
  for (const Entry& e : entries_) {
    if (e.num_blocks_before >= 0) e.seq->block_table.resize(e.num_blocks_before);
  }
  entries_.clear();
  staged_.clear();
  pending_exports_.clear();
}

void LocalExecutor::Commit(const StepPlan& plan, const StepResult& result) {
  // Advance every sequence; sampled tokens join its tokens for the next step.
  for (size_t i = 0; i < entries_.size(); ++i) {
    Sequence& seq = *entries_[i].seq;
    seq.num_computed_tokens += entries_[i].num_scheduled;
    if (result.outputs[i].has_token()) seq.token_ids.push_back(result.outputs[i].token_id);
  }
  entries_.clear();
  for (SequenceId id : plan.finished) sequences_.erase(id);
  for (auto& [id, seq] : staged_) sequences_[id] = std::move(seq);
  staged_.clear();
  for (size_t i = 0; i < pending_exports_.size(); ++i) {
    *plan.kv_exports[i].out = std::move(pending_exports_[i]);
  }
  pending_exports_.clear();
}

StepBatch LocalExecutor::BuildBatch(int32_t graph_batch) {
  const int32_t block_size = capacity_.block_size;
  token_ids_.clear();
  positions_.clear();
  slots_.clear();
  seq_lens_.clear();
  tail_slots_.clear();
  tail_first_blocks_.clear();
  query_start_.assign(1, 0);
  int32_t max_blocks = 1;
  int32_t min_query = INT32_MAX, max_query = 0;
  for (Entry& e : entries_) {
    e.first_row = static_cast<int32_t>(token_ids_.size());
    const Sequence& seq = *e.seq;
    const int32_t end = seq.num_computed_tokens + e.num_scheduled;
    for (int32_t p = seq.num_computed_tokens; p < end; ++p) {
      token_ids_.push_back(seq.token_ids[p].value());
      positions_.push_back(p);
      slots_.push_back(seq.block_table[p / block_size] * block_size + p % block_size);
    }
    query_start_.push_back(static_cast<int32_t>(token_ids_.size()));
    seq_lens_.push_back(end);
    tail_slots_.push_back(seq.tail_slot);
    tail_first_blocks_.push_back(seq.tail_first_block);
    max_blocks = std::max(max_blocks, (end + block_size - 1) / block_size);
    min_query = std::min(min_query, e.num_scheduled);
    max_query = std::max(max_query, e.num_scheduled);
  }
  int32_t num_seqs = static_cast<int32_t>(entries_.size());
  if (graph_batch > 0) {
    // A replayed graph has one shape per batch size: pad with one-token sequences that write no
    // K/V (slot -1) and attend to one key of block 0, and use the full block-table width.
    for (; num_seqs < graph_batch; ++num_seqs) {
      token_ids_.push_back(0);
      positions_.push_back(0);
      slots_.push_back(-1);
      query_start_.push_back(static_cast<int32_t>(token_ids_.size()));
      seq_lens_.push_back(1);
      tail_slots_.push_back(-1);
      tail_first_blocks_.push_back(0);
    }
    max_blocks = inputs_.max_blocks_per_seq;
    min_query = max_query = 1;
  }
  block_tables_.assign(size_t(num_seqs) * max_blocks, 0);
  for (size_t s = 0; s < entries_.size(); ++s) {
    const std::vector<int32_t>& table = entries_[s].seq->block_table;
    const size_t used = std::min<size_t>(table.size(), max_blocks);
    std::copy(table.begin(), table.begin() + used, block_tables_.begin() + s * max_blocks);
  }
  const int32_t num_tokens = static_cast<int32_t>(token_ids_.size());
  const int32_t half = rope_->rotary_dim() / 2;
  rope_cos_.resize(size_t(num_tokens) * half);
  rope_sin_.resize(size_t(num_tokens) * half);
  rope_->Fill(positions_.data(), num_tokens, rope_cos_.data(), rope_sin_.data());

  // Each part goes to its fixed place in the inputs buffer (fixed, so graphs see one address).
  LOOM_CHECK(num_tokens <= inputs_.max_tokens && num_seqs <= inputs_.max_seqs &&
                 max_blocks <= inputs_.max_blocks_per_seq,
             "step inputs beyond the sizes allocated at start");
  char* base = device_inputs_.as<char>();
  auto put = [&](int64_t offset, const auto& host) {
    backend_->CopyToDevice(base + offset, host.data(),
                           static_cast<int64_t>(host.size() * sizeof(host[0])));
    return reinterpret_cast<decltype(host.data())>(base + offset);
  };
  StepBatch batch;
  batch.num_tokens = num_tokens;
  batch.token_ids = put(inputs_.token_ids, token_ids_);
  batch.slot_mapping = put(inputs_.slots, slots_);
  batch.rope_cos = put(inputs_.rope_cos, rope_cos_);
  batch.rope_sin = put(inputs_.rope_sin, rope_sin_);
  batch.num_seqs = num_seqs;
  batch.query_start = put(inputs_.query_start, query_start_);
  batch.seq_lens = put(inputs_.seq_lens, seq_lens_);
  batch.block_tables = put(inputs_.block_tables, block_tables_);
  batch.max_blocks_per_seq = max_blocks;
  batch.tail_slots = put(inputs_.tail_slots, tail_slots_);
  batch.tail_first_blocks = put(inputs_.tail_first_blocks, tail_first_blocks_);
  batch.min_query_len = min_query;
  batch.max_query_len = max_query;
  return batch;
}

absl::Status LocalExecutor::AllocateStepInputs(int32_t max_tokens, int32_t max_seqs,
                                               int32_t max_blocks_per_seq) {
  StepInputs& in = inputs_;
  in.max_tokens = max_tokens;
  in.max_seqs = max_seqs;
  in.max_blocks_per_seq = max_blocks_per_seq;
  const int64_t half = rope_->rotary_dim() / 2;
  int64_t offset = 0;
  auto take = [&](int64_t bytes) {
    const int64_t at = offset;
    offset += (bytes + 255) / 256 * 256;
    return at;
  };
  in.token_ids = take(int64_t{max_tokens} * 4);
  in.slots = take(int64_t{max_tokens} * 4);
  in.rope_cos = take(int64_t{max_tokens} * half * 4);
  in.rope_sin = take(int64_t{max_tokens} * half * 4);
  in.query_start = take((int64_t{max_seqs} + 1) * 4);
  in.seq_lens = take(int64_t{max_seqs} * 4);
  in.block_tables = take(int64_t{max_seqs} * max_blocks_per_seq * 4);
  in.tail_slots = take(int64_t{max_seqs} * 4);
  in.tail_first_blocks = take(int64_t{max_seqs} * 4);
  LOOM_ASSIGN_OR_RETURN(device_inputs_, backend_->Allocate(offset));
  return absl::OkStatus();
}

void LocalExecutor::CountExpertRouting(std::vector<SequenceOutput>& outputs) {
  const int32_t num_experts = info_.num_experts;
  const int32_t top_k = info_.num_experts_per_tok;
  for (SequenceOutput& output : outputs) {
    output.expert_counts.assign(size_t(info_.num_layers) * num_experts, 0);
  }
  for (int32_t layer = 0; layer < info_.num_layers; ++layer) {
    const int32_t* routes = model_->RoutedExperts(layer);
    if (routes == nullptr) continue;
    // Rows of real sequences only (a padded graph batch's rows come after them).
    int32_t num_rows = 0;
    for (const Entry& e : entries_) num_rows = std::max(num_rows, e.first_row + e.num_scheduled);
    host_routes_.resize(size_t(num_rows) * top_k);
    backend_->CopyToHost(host_routes_.data(), routes,
                         static_cast<int64_t>(host_routes_.size() * sizeof(int32_t)));
    for (size_t i = 0; i < entries_.size(); ++i) {
      int32_t* counts = outputs[i].expert_counts.data() + size_t(layer) * num_experts;
      const Entry& e = entries_[i];
      for (int64_t j = int64_t{e.first_row} * top_k;
           j < int64_t{e.first_row + e.num_scheduled} * top_k; ++j) {
        ++counts[host_routes_[j]];
      }
    }
  }
}

void LocalExecutor::CollectLogitRequests() {
  logit_requests_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    const Sequence& seq = *e.seq;
    const int32_t end = seq.num_computed_tokens + e.num_scheduled;
    if (seq.sampling.prompt_logprobs >= 0) {
      // Position p scores prompt token p + 1.
      const int32_t last = std::min(end, seq.num_prompt_tokens - 1);
      for (int32_t p = seq.num_computed_tokens; p < last; ++p) {
        logit_requests_.push_back(
            {static_cast<int32_t>(i), e.first_row + (p - seq.num_computed_tokens), p});
      }
    }
    if (end == static_cast<int32_t>(seq.token_ids.size())) {
      logit_requests_.push_back({static_cast<int32_t>(i), e.first_row + e.num_scheduled - 1, -1});
    }
  }
}

void LocalExecutor::RunLogitRequests(std::vector<SequenceOutput>& outputs) {
  const int32_t vocab = info_.vocab_size;
  const size_t chunk = static_cast<size_t>(model_->max_logit_rows());
  for (size_t begin = 0; begin < logit_requests_.size(); begin += chunk) {
    const size_t end = std::min(logit_requests_.size(), begin + chunk);
    logit_rows_.clear();
    for (size_t r = begin; r < end; ++r) logit_rows_.push_back(logit_requests_[r].row);
    const float* device_logits = model_->Logits(logit_rows_);
    host_logits_.resize(logit_rows_.size() * size_t(vocab));
    backend_->CopyToHost(host_logits_.data(), device_logits,
                         int64_t(host_logits_.size() * sizeof(float)));
    if (logits_observer_) {
      for (size_t r = begin; r < end; ++r) {
        const LogitRequest& request = logit_requests_[r];
        const Entry& entry = entries_[request.entry];
        const int32_t position =
            request.prompt_position >= 0
                ? request.prompt_position
                : entry.seq->num_computed_tokens + entry.num_scheduled - 1;
        logits_observer_(entry.seq_id, position,
                         std::span<const float>(host_logits_.data() + (r - begin) * vocab, vocab));
      }
    }
    auto work = [&](int64_t lo, int64_t hi, int thread) {
      for (int64_t r = lo; r < hi; ++r) {
        const LogitRequest& request = logit_requests_[begin + r];
        ProcessLogitRow(request, host_logits_.data() + r * vocab, sampler_scratch_[thread],
                        outputs[request.entry]);
      }
    };
    // Requests of one sequence append to its output in order, so a sequence's prompt rows
    // must stay on one thread: split by request only when each sequence has one request.
    const bool one_per_sequence = std::all_of(
        logit_requests_.begin() + begin, logit_requests_.begin() + end,
        [](const LogitRequest& r) { return r.prompt_position < 0; });
    if (one_per_sequence && end - begin > 1) {
      host_pool_->ParallelFor(static_cast<int64_t>(end - begin), work);
    } else {
      work(0, static_cast<int64_t>(end - begin), 0);
    }
  }
}

void LocalExecutor::ProcessLogitRow(const LogitRequest& request, float* logits,
                                    SamplerScratch& scratch, SequenceOutput& output) {
  const Sequence& seq = *entries_[request.entry].seq;
  const std::span<float> row(logits, static_cast<size_t>(info_.vocab_size));
  if (request.prompt_position >= 0) {
    if (output.prompt_logprobs.empty()) output.prompt_logprobs_start = request.prompt_position;
    output.prompt_logprobs.push_back(ComputeLogprobs(
        row, seq.token_ids[request.prompt_position + 1], seq.sampling.prompt_logprobs));
    return;
  }
  SamplerInput input;
  input.params = &seq.sampling;
  input.prompt_token_ids = std::span(seq.token_ids.data(), seq.num_prompt_tokens);
  input.output_token_ids = std::span(seq.token_ids.data() + seq.num_prompt_tokens,
                                     seq.token_ids.size() - seq.num_prompt_tokens);
  SampleResult sampled = Sample(row, input, scratch);
  output.token_id = sampled.token_id;
  if (sampled.logprobs) output.logprobs.push_back(std::move(*sampled.logprobs));
}

void LocalExecutor::ApplyExpertHints(const StepPlan& plan) {
  // The plan counts sparse layers only (engine/api/expert_hints.h); the store keys experts by
  // decoder layer. Keys outside the model are dropped.
  auto to_store = [this](ExpertKey key, ExpertKey* out) {
    if (key.layer < 0 || key.layer >= static_cast<int32_t>(sparse_layer_index_.size()) ||
        key.expert < 0 || key.expert >= info_.num_experts) {
      return false;
    }
    *out = {sparse_layer_index_[static_cast<size_t>(key.layer)], key.expert};
    return true;
  };
  if (!plan.expert_scores.empty()) {
    std::vector<std::pair<ExpertKey, double>> scores;
    scores.reserve(plan.expert_scores.size());
    for (const ExpertScore& s : plan.expert_scores) {
      ExpertKey key;
      if (to_store(s.key, &key)) scores.emplace_back(key, s.score);
    }
    expert_store_->SetScores(scores);
  }
  if (!plan.expert_prefetch.empty()) {
    // Loaded while the forward pass runs; the step's own (on-demand) loads go first.
    std::vector<ExpertKey> keys;
    keys.reserve(plan.expert_prefetch.size());
    for (const ExpertPrefetchHint& h : plan.expert_prefetch) {
      ExpertKey key;
      if (to_store(h.key, &key)) keys.push_back(key);
    }
    expert_store_->Prefetch(keys);
  }
}

ExpertCacheCounters LocalExecutor::ExpertCounters() const {
  const ExpertStoreStats s = expert_store_->Stats();
  ExpertCacheCounters c;
  c.slots = s.num_slots;
  c.resident = s.resident;
  c.slot_bytes = expert_store_->slot_bytes();
  c.hits = s.hits;
  c.misses = s.misses;
  c.evictions = s.evictions;
  c.prefetches_issued = s.prefetches_issued;
  c.prefetches_used = s.prefetches_used;
  c.prefetches_wasted = s.prefetches_wasted;
  c.prefetches_cancelled = s.prefetches_cancelled;
  c.prefetches_dropped = s.prefetches_dropped;
  c.computed_at_home = s.computed_at_home;
  c.bytes_loaded = s.bytes_loaded;
  c.load_seconds = s.load_seconds;
  c.wait_seconds = s.wait_seconds;
  return c;
}

}  // namespace loom
