// scheduler/offline_batch.h against a fake executor that checks every plan against the contract
// of engine/api/step.h (known and unique sequences, blocks owned by one sequence at a time, block
// tables covering the scheduled tokens, the step budget and sequence cap, decodes before prefill
// chunks) and answers with deterministic fake tokens: budgets, chunking, stop tokens,
// max_new_tokens, admission, refusals, and the release of every sequence at the end.
#include "scheduler/offline_batch.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/common/strings.h"
#include "gtest/gtest.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

constexpr int32_t kVocab = 1000;

// The token the fake "model" samples: a function of the sequence's first token and how many
// tokens it generated before, so it does not depend on batching or chunking.
TokenId FakeToken(TokenId first, size_t num_generated) {
  return TokenId(static_cast<int32_t>((first.value() * 7 + num_generated * 13 + 1) % kVocab));
}

class FakeExecutor : public Executor {
 public:
  explicit FakeExecutor(const KvCapacity& capacity, int32_t context = 4096) : capacity_(capacity) {
    info_.architecture = "Fake";
    info_.vocab_size = kVocab;
    info_.max_context_len = context;
  }

  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override {
    plans.push_back(plan);
    if (plans.size() > 100'000) return absl::InternalError("runaway: too many steps");
    if (fail_at_step >= 0 && plans.size() == static_cast<size_t>(fail_at_step) + 1) {
      return absl::UnavailableError("fake device lost");
    }
    if (std::string problem = Check(plan); !problem.empty()) {
      violations.push_back(problem);
      return absl::InvalidArgumentError(problem);
    }
    return Apply(plan);
  }

  const ModelInfo& model_info() const override { return info_; }
  const KvCapacity& capacity() const override { return capacity_; }

  size_t num_live() const { return sequences_.size(); }

  std::vector<StepPlan> plans;
  std::vector<std::string> violations;
  size_t max_live = 0;
  int fail_at_step = -1;    // Execute call (0-based) that fails as a device error would
  int32_t step_budget = 0;  // when > 0, a tighter budget than capacity to check

 private:
  struct Sequence {
    std::vector<TokenId> tokens;
    int32_t num_prompt = 0;
    int32_t computed = 0;
    std::vector<BlockId> blocks;
    SamplingParams sampling;
  };

  // The first contract violation of `plan` against the current state, or "".
  std::string Check(const StepPlan& plan) const {
    std::set<SequenceId> finished, seen;
    for (SequenceId id : plan.finished) {
      if (!sequences_.contains(id)) return StrCat("finished ", id, " unknown");
      if (!finished.insert(id).second) return StrCat("finished ", id, " twice");
    }
    // Block owners once `finished` is applied.
    std::map<int32_t, SequenceId> owner;
    for (const auto& [id, seq] : sequences_) {
      if (finished.contains(id)) continue;
      for (BlockId b : seq.blocks) owner[b.value()] = id;
    }
    auto claim = [&](SequenceId id, BlockId b) -> std::string {
      if (b.value() < 0 || b.value() >= capacity_.num_blocks)
        return StrCat("block ", b, " out of range");
      auto [it, inserted] = owner.emplace(b.value(), id);
      if (!inserted) return StrCat("block ", b, " of ", id, " is owned by ", it->second);
      return "";
    };
    int64_t tokens = 0;
    bool prefill_seen = false, chunk_seen = false;
    for (const NewSequencePlan& p : plan.new_sequences) {
      if (!seen.insert(p.seq_id).second) return StrCat(p.seq_id, " twice in the plan");
      if (sequences_.contains(p.seq_id) && !finished.contains(p.seq_id)) {
        return StrCat("new ", p.seq_id, " exists");
      }
      if (p.num_scheduled_tokens < 1 || p.num_computed_tokens + p.num_scheduled_tokens >
                                            static_cast<int32_t>(p.token_ids.size())) {
        return StrCat("new ", p.seq_id, " schedules ", p.num_scheduled_tokens);
      }
      if (p.num_prompt_tokens != static_cast<int32_t>(p.token_ids.size())) {
        return StrCat("new ", p.seq_id, " prompt count");
      }
      for (BlockId b : p.block_table) {
        if (std::string problem = claim(p.seq_id, b); !problem.empty()) return problem;
      }
      const int64_t cover =
          int64_t{capacity_.block_size} * static_cast<int64_t>(p.block_table.size());
      if (cover < p.num_computed_tokens + p.num_scheduled_tokens) {
        return StrCat("new ", p.seq_id, " table too short");
      }
      tokens += p.num_scheduled_tokens;
      prefill_seen = true;
    }
    for (const ContinuingSequencePlan& p : plan.continuing) {
      if (!seen.insert(p.seq_id).second) return StrCat(p.seq_id, " twice in the plan");
      auto it = sequences_.find(p.seq_id);
      if (it == sequences_.end() || finished.contains(p.seq_id)) {
        return StrCat("continuing ", p.seq_id, " unknown");
      }
      const Sequence& seq = it->second;
      const int32_t known = static_cast<int32_t>(seq.tokens.size());
      if (p.num_scheduled_tokens < 1 || seq.computed + p.num_scheduled_tokens > known) {
        return StrCat("continuing ", p.seq_id, " schedules ", p.num_scheduled_tokens);
      }
      for (BlockId b : p.new_block_ids) {
        if (std::string problem = claim(p.seq_id, b); !problem.empty()) return problem;
      }
      const int64_t cover = int64_t{capacity_.block_size} *
                            static_cast<int64_t>(seq.blocks.size() + p.new_block_ids.size());
      if (cover < seq.computed + p.num_scheduled_tokens) {
        return StrCat("continuing ", p.seq_id, " table too short");
      }
      // Among continuing sequences, decodes come first.
      const bool decode = seq.computed + 1 == known;
      if (decode && chunk_seen) return StrCat("decode of ", p.seq_id, " after a prefill chunk");
      chunk_seen |= !decode;
      prefill_seen |= !decode;
      tokens += p.num_scheduled_tokens;
    }
    if (tokens > capacity_.max_num_batched_tokens) return StrCat(tokens, " tokens over the budget");
    if (step_budget > 0 && tokens > step_budget)
      return StrCat(tokens, " tokens over ", step_budget);
    if (static_cast<int32_t>(seen.size()) > capacity_.max_num_seqs) return "too many sequences";
    // Decodes first: when a prefill chunk runs, every sequence waiting to decode runs too.
    if (prefill_seen) {
      for (const auto& [id, seq] : sequences_) {
        const bool waiting = seq.computed + 1 == static_cast<int32_t>(seq.tokens.size());
        if (waiting && !finished.contains(id) && !seen.contains(id)) {
          return StrCat("decode of ", id, " left out while a prefill chunk runs");
        }
      }
    }
    return "";
  }

  StepResult Apply(const StepPlan& plan) {
    for (SequenceId id : plan.finished) sequences_.erase(id);
    StepResult result;
    result.step_id = plan.step_id;
    std::vector<std::pair<SequenceId, int32_t>> work;
    for (const NewSequencePlan& p : plan.new_sequences) {
      Sequence& seq = sequences_[p.seq_id];
      seq.tokens = p.token_ids;
      seq.num_prompt = p.num_prompt_tokens;
      seq.computed = p.num_computed_tokens;
      seq.blocks = p.block_table;
      seq.sampling = p.sampling;
      work.emplace_back(p.seq_id, p.num_scheduled_tokens);
    }
    for (const ContinuingSequencePlan& p : plan.continuing) {
      Sequence& seq = sequences_[p.seq_id];
      seq.blocks.insert(seq.blocks.end(), p.new_block_ids.begin(), p.new_block_ids.end());
      work.emplace_back(p.seq_id, p.num_scheduled_tokens);
    }
    for (const auto& [id, count] : work) {
      Sequence& seq = sequences_[id];
      SequenceOutput out;
      out.seq_id = id;
      const int32_t end = seq.computed + count;
      if (seq.sampling.prompt_logprobs >= 0) {
        for (int32_t p = seq.computed; p < std::min(end, seq.num_prompt - 1); ++p) {
          if (out.prompt_logprobs.empty()) out.prompt_logprobs_start = p;
          PositionLogprobs entry;
          entry.token = {seq.tokens[p + 1], -1.0f};
          out.prompt_logprobs.push_back(entry);
        }
      }
      seq.computed = end;
      result.num_tokens_computed += count;
      if (end == static_cast<int32_t>(seq.tokens.size())) {
        out.token_id = FakeToken(seq.tokens[0], seq.tokens.size() - seq.num_prompt);
        if (seq.sampling.logprobs >= 0) {
          PositionLogprobs entry;
          entry.token = {out.token_id, -0.5f};
          out.logprobs.push_back(entry);
        }
        seq.tokens.push_back(out.token_id);
      }
      result.outputs.push_back(std::move(out));
    }
    max_live = std::max(max_live, sequences_.size());
    return result;
  }

  ModelInfo info_;
  KvCapacity capacity_;
  std::map<SequenceId, Sequence> sequences_;
};

KvCapacity Capacity(int32_t num_blocks = 64, int32_t block_size = 4, int32_t budget = 32,
                    int32_t max_seqs = 8) {
  KvCapacity capacity;
  capacity.num_blocks = num_blocks;
  capacity.block_size = block_size;
  capacity.max_num_batched_tokens = budget;
  capacity.max_num_seqs = max_seqs;
  return capacity;
}

OfflineRequest Request(int32_t prompt_len, int32_t max_new, int32_t first = 1) {
  OfflineRequest r;
  for (int32_t i = 0; i < prompt_len; ++i) r.prompt.push_back(TokenId((first + i * 3) % kVocab));
  r.max_new_tokens = max_new;
  return r;
}

std::vector<TokenId> ExpectedTokens(const OfflineRequest& r, int32_t count) {
  std::vector<TokenId> out;
  for (int32_t i = 0; i < count; ++i) out.push_back(FakeToken(r.prompt[0], i));
  return out;
}

// Runs and checks the invariants every successful run has: no violation, every sequence
// released at the end.
std::vector<OfflineResult> MustRun(FakeExecutor& executor,
                                   const std::vector<OfflineRequest>& requests,
                                   const OfflineOptions& options = {},
                                   OfflineStats* stats = nullptr) {
  absl::StatusOr<std::vector<OfflineResult>> results =
      RunOffline(executor, requests, options, stats);
  EXPECT_TRUE(results.ok()) << results.status();
  EXPECT_TRUE(executor.violations.empty()) << executor.violations.front();
  EXPECT_EQ(executor.num_live(), 0u) << "sequences left in the executor";
  return results.ok() ? *std::move(results) : std::vector<OfflineResult>();
}

int64_t PlanTokens(const StepPlan& plan) {
  int64_t tokens = 0;
  for (const auto& p : plan.new_sequences) tokens += p.num_scheduled_tokens;
  for (const auto& p : plan.continuing) tokens += p.num_scheduled_tokens;
  return tokens;
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(OfflineBatchTest, OneRequestGeneratesMaxNewTokens) {
  FakeExecutor executor(Capacity());
  const std::vector<OfflineRequest> requests = {Request(5, 7)};
  OfflineStats stats;
  const std::vector<OfflineResult> results = MustRun(executor, requests, {}, &stats);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].output_tokens, ExpectedTokens(requests[0], 7));
  EXPECT_EQ(results[0].finish, OfflineFinish::kLength);
  EXPECT_EQ(results[0].seq_id, SequenceId(1));
  EXPECT_TRUE(results[0].logprobs.empty());
  // One prefill step, six decode steps, one step releasing the sequence.
  ASSERT_EQ(executor.plans.size(), 8u);
  EXPECT_EQ(executor.plans.back().finished, std::vector<SequenceId>{SequenceId(1)});
  EXPECT_EQ(PlanTokens(executor.plans.back()), 0);
  EXPECT_EQ(stats.num_steps, 7);
  EXPECT_EQ(stats.prefill_tokens, 5);
  EXPECT_EQ(stats.decode_tokens, 6);
  ASSERT_EQ(stats.first_token_ms.size(), 1u);
  EXPECT_GE(stats.first_token_ms[0], 0.0);
}

TEST(OfflineBatchTest, SequenceIdsFollowRequestOrder) {
  FakeExecutor executor(Capacity());
  std::vector<OfflineRequest> requests = {Request(3, 2, 10), Request(4, 3, 20), Request(5, 1, 30)};
  OfflineOptions options;
  options.first_seq_id = 100;
  const std::vector<OfflineResult> results = MustRun(executor, requests, options);
  ASSERT_EQ(results.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(results[i].seq_id, SequenceId(100 + i));
    EXPECT_EQ(results[i].output_tokens, ExpectedTokens(requests[i], requests[i].max_new_tokens));
  }
}

TEST(OfflineBatchTest, StopTokensEndARequest) {
  FakeExecutor executor(Capacity());
  std::vector<OfflineRequest> requests = {Request(4, 10, 5), Request(4, 10, 50)};
  const std::vector<TokenId> first = ExpectedTokens(requests[0], 10);
  // Request 0 stops at its third token; request 1's stop tokens never come up.
  requests[0].stop_token_ids = {TokenId(999), first[2]};
  requests[1].stop_token_ids = {TokenId(kVocab - 1)};
  ASSERT_EQ(std::count(first.begin(), first.begin() + 2, first[2]), 0);
  const std::vector<OfflineResult> results = MustRun(executor, requests);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].output_tokens, std::vector<TokenId>(first.begin(), first.begin() + 3));
  EXPECT_EQ(results[0].finish, OfflineFinish::kStopToken);
  EXPECT_EQ(results[1].output_tokens.size(), 10u);
  EXPECT_EQ(results[1].finish, OfflineFinish::kLength);
  // The stopped sequence is released in the step after its stop token, while the other runs.
  bool released_early = false;
  for (const StepPlan& plan : executor.plans) {
    const bool finishes_0 = std::count(plan.finished.begin(), plan.finished.end(), SequenceId(1));
    if (finishes_0 && !plan.continuing.empty()) released_early = true;
  }
  EXPECT_TRUE(released_early);
}

TEST(OfflineBatchTest, StopOnTheFirstToken) {
  FakeExecutor executor(Capacity());
  std::vector<OfflineRequest> requests = {Request(6, 5)};
  requests[0].stop_token_ids = {ExpectedTokens(requests[0], 1)[0]};
  const std::vector<OfflineResult> results = MustRun(executor, requests);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].output_tokens.size(), 1u);
  EXPECT_EQ(results[0].finish, OfflineFinish::kStopToken);
}

TEST(OfflineBatchTest, BudgetAndPrefillChunks) {
  for (const int32_t chunk : {0, 1, 3, 7}) {
    for (const int32_t budget : {1, 5, 8, 32}) {
      SCOPED_TRACE(StrCat("chunk ", chunk, " budget ", budget));
      FakeExecutor executor(Capacity(256, 4, 32, 8));
      executor.step_budget = budget;
      std::vector<OfflineRequest> requests;
      for (int i = 0; i < 5; ++i) requests.push_back(Request(3 + 4 * i, 2 + i, 7 * i + 1));
      OfflineOptions options;
      options.prefill_chunk = chunk;
      options.max_num_batched_tokens = budget;
      const std::vector<OfflineResult> results = MustRun(executor, requests, options);
      ASSERT_EQ(results.size(), requests.size());
      for (size_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(results[i].output_tokens, ExpectedTokens(requests[i], requests[i].max_new_tokens))
            << "request " << i;
      }
      for (const StepPlan& plan : executor.plans) {
        EXPECT_LE(PlanTokens(plan), budget);
        if (chunk == 0) continue;
        for (const auto& p : plan.new_sequences) EXPECT_LE(p.num_scheduled_tokens, chunk);
        for (const auto& p : plan.continuing) EXPECT_LE(p.num_scheduled_tokens, chunk);
      }
    }
  }
}

// A budget larger than the executor's is capped by it.
TEST(OfflineBatchTest, OptionBudgetNeverExceedsTheExecutors) {
  FakeExecutor executor(Capacity(256, 4, 6, 8));
  std::vector<OfflineRequest> requests = {Request(20, 3), Request(9, 3, 40)};
  OfflineOptions options;
  options.max_num_batched_tokens = 1000;
  MustRun(executor, requests, options);
  for (const StepPlan& plan : executor.plans) EXPECT_LE(PlanTokens(plan), 6);
}

TEST(OfflineBatchTest, SequenceCap) {
  FakeExecutor executor(Capacity(256, 4, 32, 2));
  std::vector<OfflineRequest> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(Request(4, 3, 11 * i + 2));
  const std::vector<OfflineResult> results = MustRun(executor, requests);
  EXPECT_LE(executor.max_live, 2u);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(results[i].output_tokens.size(), 3u);
}

// Each request needs 3 of the 4 blocks: the second is admitted only once the first has finished
// and given its blocks back, and reuses them.
TEST(OfflineBatchTest, AdmissionWaitsForFreeBlocks) {
  FakeExecutor executor(Capacity(4, 4, 32, 8));
  std::vector<OfflineRequest> requests = {Request(6, 5, 1), Request(7, 4, 2), Request(2, 10, 3)};
  const std::vector<OfflineResult> results = MustRun(executor, requests);
  EXPECT_EQ(executor.max_live, 1u);
  ASSERT_EQ(results.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(results[i].output_tokens, ExpectedTokens(requests[i], requests[i].max_new_tokens));
  }
  // The second request's first plan also finishes the first sequence (its blocks reused).
  for (const StepPlan& plan : executor.plans) {
    if (!plan.new_sequences.empty() && plan.new_sequences[0].seq_id == SequenceId(2)) {
      EXPECT_EQ(plan.finished, std::vector<SequenceId>{SequenceId(1)});
    }
  }
}

TEST(OfflineBatchTest, StaggeredStartsDecodeBeforePrefill) {
  FakeExecutor executor(Capacity(256, 4, 6, 8));
  std::vector<OfflineRequest> requests;
  for (int i = 0; i < 4; ++i) {
    requests.push_back(Request(9, 6, 13 * i + 1));
    requests.back().first_step = 3 * i;
  }
  OfflineOptions options;
  options.prefill_chunk = 4;
  const std::vector<OfflineResult> results = MustRun(executor, requests, options);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(results[i].output_tokens, ExpectedTokens(requests[i], 6));
  }
  // Some step did run decodes alongside a prefill chunk, so the fake's ordering check applied.
  bool mixed = false;
  for (const StepPlan& plan : executor.plans) {
    mixed |= !plan.new_sequences.empty() && !plan.continuing.empty();
  }
  EXPECT_TRUE(mixed);
}

TEST(OfflineBatchTest, FirstStepDelaysAdmissionEvenWithNothingRunning) {
  FakeExecutor executor(Capacity());
  std::vector<OfflineRequest> requests = {Request(3, 2)};
  requests[0].first_step = 4;
  MustRun(executor, requests);
  ASSERT_GE(executor.plans.size(), 5u);
  for (int step = 0; step < 4; ++step) EXPECT_EQ(PlanTokens(executor.plans[step]), 0);
  EXPECT_EQ(executor.plans[4].new_sequences.size(), 1u);
}

TEST(OfflineBatchTest, LogprobsAndPromptLogprobsAccumulateAcrossChunks) {
  FakeExecutor executor(Capacity());
  std::vector<OfflineRequest> requests = {Request(10, 4)};
  requests[0].sampling.logprobs = 0;
  requests[0].sampling.prompt_logprobs = 0;
  OfflineOptions options;
  options.prefill_chunk = 3;
  const std::vector<OfflineResult> results = MustRun(executor, requests, options);
  ASSERT_EQ(results.size(), 1u);
  ASSERT_EQ(results[0].prompt_logprobs.size(), 9u);
  for (size_t p = 0; p < 9; ++p) {
    EXPECT_EQ(results[0].prompt_logprobs[p].token.token_id, requests[0].prompt[p + 1]);
  }
  ASSERT_EQ(results[0].logprobs.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(results[0].logprobs[i].token.token_id, results[0].output_tokens[i]);
  }
}

// ---------------------------------------------------------------------------------------------
// Refusals: before any step runs, so the executor sees nothing.

void ExpectRefusedUpFront(FakeExecutor& executor, const std::vector<OfflineRequest>& requests,
                          absl::StatusCode code, std::string_view message) {
  absl::StatusOr<std::vector<OfflineResult>> results = RunOffline(executor, requests);
  ASSERT_FALSE(results.ok());
  EXPECT_EQ(results.status().code(), code) << results.status();
  LOOM_EXPECT_CONTAINS(Message(results.status()), std::string(message));
  EXPECT_TRUE(executor.plans.empty()) << "a step ran before the refusal";
  EXPECT_EQ(executor.num_live(), 0u);
}

TEST(OfflineBatchTest, KvDemandLargerThanTheCache) {
  FakeExecutor executor(Capacity(4, 4, 32, 8));  // 16 token slots
  // 10 + 7 = 17 tokens need 5 blocks.
  ExpectRefusedUpFront(executor, {Request(3, 2), Request(10, 7)},
                       absl::StatusCode::kResourceExhausted,
                       "request 1 needs 5 KV blocks; the cache has 4");
}

// prompt + max_new_tokens does not fit an int32: computed without overflow.
TEST(OfflineBatchTest, HugeMaxNewTokensIsNotAnOverflow) {
  FakeExecutor executor(Capacity(4, 4, 32, 8), /*context=*/INT32_MAX);
  ExpectRefusedUpFront(executor, {Request(3, INT32_MAX)}, absl::StatusCode::kInvalidArgument,
                       "request 0: 3 prompt tokens plus 2147483647 new tokens exceed the context "
                       "of 2147483647");
}

TEST(OfflineBatchTest, EmptyPrompt) {
  FakeExecutor executor(Capacity());
  ExpectRefusedUpFront(executor, {Request(3, 2), Request(0, 2)}, absl::StatusCode::kInvalidArgument,
                       "request 1 has an empty prompt");
}

TEST(OfflineBatchTest, MaxNewTokensMustBePositive) {
  for (const int32_t max_new : {0, -4}) {
    FakeExecutor executor(Capacity());
    ExpectRefusedUpFront(executor, {Request(3, max_new)}, absl::StatusCode::kInvalidArgument,
                         StrCat("request 0 has max_new_tokens ", max_new, " (must be >= 1)"));
  }
}

TEST(OfflineBatchTest, TokenOutsideTheVocabulary) {
  FakeExecutor executor(Capacity());
  std::vector<OfflineRequest> requests = {Request(3, 2), Request(3, 2)};
  requests[1].prompt[1] = TokenId(kVocab);
  ExpectRefusedUpFront(executor, requests, absl::StatusCode::kInvalidArgument,
                       "request 1 has token 1000 outside the vocabulary [0, 1000)");
  requests[1].prompt[1] = TokenId(-1);
  ExpectRefusedUpFront(executor, requests, absl::StatusCode::kInvalidArgument,
                       "request 1 has token -1");
}

TEST(OfflineBatchTest, LongerThanTheContext) {
  FakeExecutor executor(Capacity(256), /*context=*/20);
  ExpectRefusedUpFront(executor, {Request(15, 6)}, absl::StatusCode::kInvalidArgument,
                       "request 0: 15 prompt tokens plus 6 new tokens exceed the context of 20");
  MustRun(executor, {Request(15, 5)});
}

TEST(OfflineBatchTest, BrokenCapacityIsRefusedNotAHang) {
  for (const KvCapacity& capacity : {Capacity(64, 0, 32, 8), Capacity(64, 4, 0, 8),
                                     Capacity(64, 4, 32, 0), Capacity(64, -4, 32, 8)}) {
    FakeExecutor executor(capacity);
    ExpectRefusedUpFront(executor, {Request(3, 2)}, absl::StatusCode::kInvalidArgument,
                         "executor capacity");
  }
}

TEST(OfflineBatchTest, NoRequests) {
  FakeExecutor executor(Capacity());
  EXPECT_TRUE(MustRun(executor, {}).empty());
  EXPECT_TRUE(executor.plans.empty());
}

// A step that fails (a device error) ends the run with that error, and every sequence the
// executor still holds is released.
TEST(OfflineBatchTest, AFailedStepReleasesEverySequence) {
  for (const int fail_at : {0, 1, 2, 5, 9}) {
    SCOPED_TRACE(fail_at);
    FakeExecutor executor(Capacity(256, 4, 8, 8));
    executor.fail_at_step = fail_at;
    std::vector<OfflineRequest> requests;
    for (int i = 0; i < 4; ++i) {
      requests.push_back(Request(6, 2 + 2 * i, 17 * i + 3));
      requests.back().first_step = i;
    }
    absl::StatusOr<std::vector<OfflineResult>> results = RunOffline(executor, requests);
    ASSERT_FALSE(results.ok());
    EXPECT_EQ(results.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(Message(results.status()), "fake device lost");
    EXPECT_TRUE(executor.violations.empty()) << executor.violations.front();
    EXPECT_EQ(executor.num_live(), 0u);
  }
}

}  // namespace
}  // namespace loom
