// A device-free Executor for scheduler tests that checks the step contract and makes the
// outputs depend on what is really in the KV blocks.
//
// Its "KV cache" stores, per block slot, the token written at that position. Computing positions
// writes the sequence's tokens into the slots its block table names; sampling reads the whole
// prefix back through the block table and hashes it with the sequence's seed. So a wrong block
// table, a prefix-cache block with the wrong content, or a lost block after preemption changes
// the tokens, and the test's comparison against ExpectedTokens catches it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/api/executor.h"
#include "engine/common/strings.h"

namespace loom::testing {

// The token a sequence with `seed` samples after `prefix`.
inline TokenId NextToken(uint64_t seed, const std::vector<TokenId>& prefix, int32_t vocab) {
  uint64_t h = seed * 0x9E3779B97F4A7C15ull + 17;
  for (TokenId t : prefix) h = (h ^ static_cast<uint64_t>(t.value())) * 0x100000001B3ull;
  return TokenId(static_cast<int32_t>((h >> 17) % static_cast<uint64_t>(vocab)));
}

// What a request generates alone: the reference for every scheduling.
inline std::vector<TokenId> ExpectedTokens(uint64_t seed, std::vector<TokenId> tokens,
                                           int32_t max_new, const std::vector<TokenId>& stops,
                                           int32_t vocab) {
  std::vector<TokenId> out;
  while (static_cast<int32_t>(out.size()) < max_new) {
    const TokenId t = NextToken(seed, tokens, vocab);
    tokens.push_back(t);
    out.push_back(t);
    if (std::find(stops.begin(), stops.end(), t) != stops.end()) break;
  }
  return out;
}

// The log-probability the fake model reports for prompt token `token` after `prefix`.
inline float PromptLogprob(const std::vector<TokenId>& prefix, TokenId token) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (TokenId t : prefix) h = (h ^ static_cast<uint64_t>(t.value())) * 0x100000001B3ull;
  h = (h ^ static_cast<uint64_t>(token.value())) * 0x100000001B3ull;
  return -static_cast<float>((h >> 20) % 1000) / 100.0f;
}

// What a request's prompt log-probabilities are: prompt tokens 1.. with their scores.
inline std::vector<std::pair<TokenId, float>> ExpectedPromptLogprobs(
    const std::vector<TokenId>& prompt) {
  std::vector<std::pair<TokenId, float>> out;
  for (size_t p = 1; p < prompt.size(); ++p) {
    out.emplace_back(prompt[p], PromptLogprob({prompt.begin(), prompt.begin() + p}, prompt[p]));
  }
  return out;
}

// The fake model's routing: in decoder layer `layer` a token goes to the
// num_experts_per_tok experts that follow (2 * token + 3 * layer) mod num_experts, in order (and
// wrapping). A pure function of the token, so requests made of one repeated token form a
// "topic" whose experts tests know; tokens 0, 1, 2, ... use disjoint pairs in every layer when
// num_experts_per_tok is 2 (up to num_experts / 2 topics).
inline std::vector<int32_t> FakeRoutedExperts(TokenId token, int32_t layer, const ModelInfo& info) {
  std::vector<int32_t> experts;
  const int64_t first = (2 * int64_t{token.value()} + 3 * int64_t{layer}) % info.num_experts;
  for (int32_t j = 0; j < info.num_experts_per_tok; ++j) {
    experts.push_back(static_cast<int32_t>((first + j) % info.num_experts));
  }
  return experts;
}

class FakeExecutor : public Executor {
 public:
  FakeExecutor(ModelInfo info, KvCapacity capacity)
      : info_(std::move(info)), capacity_(capacity),
        slots_(static_cast<size_t>(capacity.num_blocks) * capacity.block_size, TokenId(-1)) {}

  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override {
    if (step_delay_.count() > 0) std::this_thread::sleep_for(step_delay_);
    for (SequenceId id : plan.finished) {
      if (seqs_.erase(id) == 0) return Fail(StrCat("finished unknown sequence ", id));
    }
    // KV transfers: a block's bytes are its slots' token ids (int32 each).
    const int32_t bs = capacity_.block_size;
    for (const KvImport& im : plan.kv_imports) {
      if (im.data == nullptr || im.data->layout != "fake" ||
          im.data->num_blocks != static_cast<int32_t>(im.blocks.size()) ||
          im.data->blocks.size() != im.blocks.size() * bs * sizeof(int32_t)) {
        return Fail("malformed import");
      }
      for (const auto& [id, seq] : seqs_) {
        for (BlockId b : im.blocks) {
          if (std::find(seq.blocks.begin(), seq.blocks.end(), b) != seq.blocks.end()) {
            return Fail(StrCat("import into block ", b, " of live sequence ", id));
          }
        }
      }
      for (size_t i = 0; i < im.blocks.size(); ++i) {
        std::memcpy(&slots_[static_cast<size_t>(im.blocks[i].value()) * bs],
                    im.data->blocks.data() + i * bs * sizeof(int32_t), bs * sizeof(int32_t));
      }
      ++num_imports_;
    }
    for (const KvExport& ex : plan.kv_exports) {
      if (ex.out == nullptr) return Fail("export without a blob");
      if (ex.tail_of.value() != 0 && !seqs_.contains(ex.tail_of)) {
        return Fail(StrCat("export of the tail of unknown sequence ", ex.tail_of));
      }
      ex.out->layout = "fake";
      ex.out->num_blocks = static_cast<int32_t>(ex.blocks.size());
      ex.out->blocks.resize(ex.blocks.size() * bs * sizeof(int32_t));
      for (size_t i = 0; i < ex.blocks.size(); ++i) {
        std::memcpy(ex.out->blocks.data() + i * bs * sizeof(int32_t),
                    &slots_[static_cast<size_t>(ex.blocks[i].value()) * bs], bs * sizeof(int32_t));
      }
      ++num_exports_;
    }
    StepResult result;
    result.step_id = plan.step_id;
    int32_t total = 0;
    for (const NewSequencePlan& p : plan.new_sequences) {
      if (seqs_.contains(p.seq_id)) return Fail(StrCat("sequence ", p.seq_id, " is not new"));
      Seq& s = seqs_[p.seq_id];
      s.tokens = p.token_ids;
      s.blocks = p.block_table;
      s.computed = p.num_computed_tokens;
      s.seed = p.sampling.seed;
      s.num_prompt = p.num_prompt_tokens;
      s.prompt_logprobs = p.sampling.prompt_logprobs;
      // A prefix-cache hit must already hold exactly these tokens.
      for (int32_t pos = 0; pos < s.computed; ++pos) {
        if (Slot(s, pos) != s.tokens[pos]) {
          return Fail(StrCat("sequence ", p.seq_id, " reuses a block whose position ", pos,
                             " holds another token"));
        }
      }
      absl::StatusOr<SequenceOutput> out =
          Compute(p.seq_id, s, p.num_scheduled_tokens, plan.report_expert_routing);
      if (!out.ok()) return out.status();
      result.outputs.push_back(*out);
      total += p.num_scheduled_tokens;
    }
    for (const ContinuingSequencePlan& p : plan.continuing) {
      auto it = seqs_.find(p.seq_id);
      if (it == seqs_.end()) return Fail(StrCat("continuing unknown sequence ", p.seq_id));
      it->second.blocks.insert(it->second.blocks.end(), p.new_block_ids.begin(),
                               p.new_block_ids.end());
      absl::StatusOr<SequenceOutput> out =
          Compute(p.seq_id, it->second, p.num_scheduled_tokens, plan.report_expert_routing);
      if (!out.ok()) return out.status();
      result.outputs.push_back(*out);
      total += p.num_scheduled_tokens;
    }
    if (total > capacity_.max_num_batched_tokens) return Fail("step over the token budget");
    if (static_cast<int32_t>(plan.new_sequences.size() + plan.continuing.size()) >
        capacity_.max_num_seqs) {
      return Fail("step over the sequence cap");
    }
    result.num_tokens_computed = total;
    result.expert_cache = expert_cache_;
    if (plan.report_expert_routing) ++num_routing_steps_;
    ++num_steps_;
    return result;
  }

  const ModelInfo& model_info() const override { return info_; }
  const KvCapacity& capacity() const override { return capacity_; }
  size_t num_sequences() const { return seqs_.size(); }
  // Makes every step take at least this long (tests that must act while a request runs).
  void set_step_delay(std::chrono::microseconds delay) { step_delay_ = delay; }
  int64_t num_steps() const { return num_steps_; }
  int64_t num_imports() const { return num_imports_; }
  int64_t num_exports() const { return num_exports_; }
  // Steps whose plan asked for the expert routing.
  int64_t num_routing_steps() const { return num_routing_steps_; }
  // What every later result reports as the expert cache's counters.
  void set_expert_cache(const ExpertCacheCounters& counters) { expert_cache_ = counters; }

 private:
  struct Seq {
    std::vector<TokenId> tokens;
    std::vector<BlockId> blocks;
    int32_t computed = 0;
    uint64_t seed = 0;
    int32_t num_prompt = 0;
    int32_t prompt_logprobs = -1;
  };

  static absl::Status Fail(std::string message) {
    return absl::FailedPreconditionError(std::move(message));
  }

  TokenId& Slot(const Seq& s, int32_t pos) {
    const int32_t bs = capacity_.block_size;
    return slots_[static_cast<size_t>(s.blocks[pos / bs].value()) * bs + pos % bs];
  }

  absl::StatusOr<SequenceOutput> Compute(SequenceId id, Seq& s, int32_t n, bool report_routing) {
    const int32_t end = s.computed + n;
    if (n < 1 || end > static_cast<int32_t>(s.tokens.size())) {
      return Fail(StrCat("sequence ", id, " schedules ", n, " tokens past what it knows"));
    }
    if (static_cast<int64_t>(s.blocks.size()) * capacity_.block_size < end) {
      return Fail(StrCat("sequence ", id, " has too few blocks for ", end, " tokens"));
    }
    for (int32_t pos = s.computed; pos < end; ++pos) Slot(s, pos) = s.tokens[pos];
    SequenceOutput out;
    out.seq_id = id;
    if (report_routing && info_.num_experts > 0) {
      // As the engine: every computed token counts once per routed expert in every sparse
      // layer; dense layers' rows stay zero.
      const int32_t num_experts = info_.num_experts;
      out.expert_counts.assign(static_cast<size_t>(info_.num_layers) * num_experts, 0);
      for (int32_t pos = s.computed; pos < end; ++pos) {
        for (int32_t l = 0; l < info_.num_layers; ++l) {
          if (!info_.sparse_layers.empty() && !info_.sparse_layers[l]) continue;
          for (int32_t e : FakeRoutedExperts(s.tokens[pos], l, info_)) {
            ++out.expert_counts[static_cast<size_t>(l) * num_experts + e];
          }
        }
      }
    }
    if (s.prompt_logprobs >= 0) {
      // As the engine: each computed prompt position scores the next prompt token, reading the
      // prefix back through the block table.
      out.prompt_logprobs_start = s.computed;
      std::vector<TokenId> prefix;
      for (int32_t pos = 0; pos < std::min(end, s.num_prompt - 1); ++pos) {
        prefix.push_back(Slot(s, pos));
        if (pos < s.computed) continue;
        PositionLogprobs lp;
        lp.token = {s.tokens[pos + 1], PromptLogprob(prefix, s.tokens[pos + 1])};
        out.prompt_logprobs.push_back(lp);
      }
    }
    s.computed = end;
    if (end == static_cast<int32_t>(s.tokens.size())) {
      std::vector<TokenId> prefix;
      for (int32_t pos = 0; pos < end; ++pos) prefix.push_back(Slot(s, pos));
      out.token_id = NextToken(s.seed, prefix, info_.vocab_size);
      s.tokens.push_back(out.token_id);
    }
    return out;
  }

  ModelInfo info_;
  KvCapacity capacity_;
  std::vector<TokenId> slots_;
  absl::flat_hash_map<SequenceId, Seq> seqs_;
  int64_t num_steps_ = 0;
  int64_t num_imports_ = 0;
  int64_t num_exports_ = 0;
  int64_t num_routing_steps_ = 0;
  ExpertCacheCounters expert_cache_;
  std::chrono::microseconds step_delay_{0};
};

}  // namespace loom::testing
