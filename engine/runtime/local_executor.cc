#include "engine/runtime/local_executor.h"

#include <algorithm>
#include <chrono>

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
  LOOM_RETURN_IF_ERROR(Validate(plan));
  Apply(plan);
  StepResult result;
  result.step_id = plan.step_id;
  result.outputs.resize(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) result.outputs[i].seq_id = entries_[i].seq_id;
  if (entries_.empty()) return result;

  const StepBatch batch = BuildBatch();
  result.num_tokens_computed = batch.num_tokens;
  result.timings.prepare_ms = MillisSince(start);
  const auto forward_start = std::chrono::steady_clock::now();
  model_->Forward(batch, *kv_);
  LOOM_RETURN_IF_ERROR(backend_->Synchronize());
  result.timings.forward_ms = MillisSince(forward_start);

  const auto sample_start = std::chrono::steady_clock::now();
  CollectLogitRequests();
  RunLogitRequests(result.outputs);
  // Advance every sequence; sampled tokens join its tokens for the next step.
  for (size_t i = 0; i < entries_.size(); ++i) {
    Sequence& seq = *entries_[i].seq;
    seq.num_computed_tokens += entries_[i].num_scheduled;
    if (result.outputs[i].has_token()) seq.token_ids.push_back(result.outputs[i].token_id);
  }
  result.timings.sample_ms = MillisSince(sample_start);
  return result;
}

void LocalExecutor::Apply(const StepPlan& plan) {
  for (SequenceId id : plan.finished) sequences_.erase(id);
  for (const BlockCopy& copy : plan.block_copies) kv_->CopyBlock(copy.src, copy.dst);
  entries_.clear();
  for (const NewSequencePlan& p : plan.new_sequences) {
    Sequence& seq = sequences_[p.seq_id];
    seq.token_ids = p.token_ids;
    seq.num_prompt_tokens = p.num_prompt_tokens;
    seq.block_table.clear();
    for (BlockId block : p.block_table) seq.block_table.push_back(block.value());
    seq.num_computed_tokens = p.num_computed_tokens;
    seq.sampling = p.sampling;
    entries_.push_back({p.seq_id, &seq, p.num_scheduled_tokens, 0});
  }
  for (const ContinuingSequencePlan& p : plan.continuing) {
    Sequence& seq = sequences_.find(p.seq_id)->second;
    for (BlockId block : p.new_block_ids) seq.block_table.push_back(block.value());
    entries_.push_back({p.seq_id, &seq, p.num_scheduled_tokens, 0});
  }
}

StepBatch LocalExecutor::BuildBatch() {
  const int32_t block_size = capacity_.block_size;
  token_ids_.clear();
  positions_.clear();
  slots_.clear();
  seq_lens_.clear();
  query_start_.assign(1, 0);
  int32_t max_blocks = 1;
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
    max_blocks = std::max(max_blocks, (end + block_size - 1) / block_size);
  }
  block_tables_.assign(entries_.size() * max_blocks, 0);
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

  // Copy everything into one backend buffer (a memcpy on the CPU backend).
  struct Part { const void* data; int64_t bytes; };
  const Part parts[] = {
      {token_ids_.data(), int64_t(token_ids_.size() * 4)}, {slots_.data(), int64_t(slots_.size() * 4)},
      {rope_cos_.data(), int64_t(rope_cos_.size() * 4)},   {rope_sin_.data(), int64_t(rope_sin_.size() * 4)},
      {query_start_.data(), int64_t(query_start_.size() * 4)}, {seq_lens_.data(), int64_t(seq_lens_.size() * 4)},
      {block_tables_.data(), int64_t(block_tables_.size() * 4)}};
  int64_t total = 0;
  for (const Part& part : parts) total += (part.bytes + 63) / 64 * 64;
  if (device_inputs_.bytes() < total) {
    absl::StatusOr<DeviceBuffer> buffer = backend_->Allocate(total * 2);
    LOOM_CHECK(buffer.ok(), "step inputs: ", buffer.status().message());
    device_inputs_ = std::move(*buffer);
  }
  const void* device[7];
  char* next = device_inputs_.as<char>();
  for (size_t i = 0; i < 7; ++i) {
    backend_->CopyToDevice(next, parts[i].data, parts[i].bytes);
    device[i] = next;
    next += (parts[i].bytes + 63) / 64 * 64;
  }
  StepBatch batch;
  batch.num_tokens = num_tokens;
  batch.token_ids = static_cast<const int32_t*>(device[0]);
  batch.slot_mapping = static_cast<const int32_t*>(device[1]);
  batch.rope_cos = static_cast<const float*>(device[2]);
  batch.rope_sin = static_cast<const float*>(device[3]);
  batch.num_seqs = static_cast<int32_t>(entries_.size());
  batch.query_start = static_cast<const int32_t*>(device[4]);
  batch.seq_lens = static_cast<const int32_t*>(device[5]);
  batch.block_tables = static_cast<const int32_t*>(device[6]);
  batch.max_blocks_per_seq = max_blocks;
  return batch;
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

}  // namespace loom
