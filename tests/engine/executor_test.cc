// LocalExecutor (engine/runtime/local_executor.h) driven with hand-made StepPlans on a golden
// checkpoint: every way a plan can break the contract of engine/api/step.h is refused with
// InvalidArgument naming the sequence, and leaves the engine exactly as it was (later steps give
// the tokens they give without the bad plan); block copies, prompt and sampled-token
// log-probabilities, id reuse and seeded sampling behave as documented.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/local_executor.h"
#include "gtest/gtest.h"
#include "tests/engine/weights_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

const std::string kModelDir = std::string(LOOM_SOURCE_DIR) + "/tests/golden/models/llama2_mha";
constexpr int32_t kVocab = 512;
constexpr int32_t kContext = 128;  // max_position_embeddings of llama2_mha
constexpr int32_t kBlockSize = 4;
constexpr int32_t kNumBlocks = 64;
constexpr int32_t kBudget = 64;
constexpr int32_t kMaxSeqs = 4;

EngineConfig Config() {
  EngineConfig config;
  config.model_dir = kModelDir;
  config.num_threads = 2;
  config.kv_dtype = DType::kF32;
  config.block_size = kBlockSize;
  config.num_kv_blocks = kNumBlocks;
  config.max_num_batched_tokens = kBudget;
  config.max_num_seqs = kMaxSeqs;
  config.populate_weights = false;
  return config;
}

std::unique_ptr<LocalExecutor> MakeExecutor(const EngineConfig& config = Config()) {
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor = LocalExecutor::Create(config);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return executor.ok() ? std::move(*executor) : nullptr;
}

std::vector<TokenId> Tokens(std::initializer_list<int32_t> ids) {
  std::vector<TokenId> out;
  for (int32_t id : ids) out.push_back(TokenId(id));
  return out;
}

// `count` tokens starting at `first`, stepping through the vocabulary.
std::vector<TokenId> Prompt(int32_t count, int32_t first = 3) {
  std::vector<TokenId> out;
  for (int32_t i = 0; i < count; ++i) out.push_back(TokenId((first + 37 * i) % kVocab));
  return out;
}

std::vector<BlockId> Blocks(int32_t first, int32_t count) {
  std::vector<BlockId> out;
  for (int32_t i = 0; i < count; ++i) out.push_back(BlockId(first + i));
  return out;
}

SamplingParams Greedy() {
  SamplingParams params;
  params.temperature = 0.0f;
  return params;
}

SamplingParams Random(uint64_t seed) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = 0.95f;
  params.seed = seed;
  return params;
}

// A new sequence computing `scheduled` tokens (all of them by default).
NewSequencePlan NewSeq(uint64_t id, std::vector<TokenId> tokens, std::vector<BlockId> blocks,
                       int32_t scheduled = -1, SamplingParams sampling = Greedy()) {
  NewSequencePlan plan;
  plan.seq_id = SequenceId(id);
  plan.num_prompt_tokens = static_cast<int32_t>(tokens.size());
  plan.num_scheduled_tokens = scheduled >= 0 ? scheduled : static_cast<int32_t>(tokens.size());
  plan.token_ids = std::move(tokens);
  plan.block_table = std::move(blocks);
  plan.sampling = sampling;
  return plan;
}

ContinuingSequencePlan Continue(uint64_t id, int32_t scheduled = 1,
                                std::vector<BlockId> new_blocks = {}) {
  return ContinuingSequencePlan{SequenceId(id), std::move(new_blocks), scheduled};
}

StepResult MustExecute(LocalExecutor& executor, const StepPlan& plan) {
  absl::StatusOr<StepResult> result = executor.Execute(plan);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : StepResult();
}

// Greedy tokens of `prompt` alone on a fresh executor: prefill, then `count - 1` decodes.
std::vector<TokenId> AloneTokens(const std::vector<TokenId>& prompt, int32_t count,
                                 SamplingParams sampling = Greedy(),
                                 const EngineConfig& config = Config()) {
  auto executor = MakeExecutor(config);
  if (executor == nullptr) return {};
  std::vector<TokenId> out;
  StepPlan plan;
  plan.new_sequences.push_back(NewSeq(1, prompt, Blocks(0, 16), -1, sampling));
  out.push_back(MustExecute(*executor, plan).outputs.at(0).token_id);
  for (int32_t i = 1; i < count; ++i) {
    StepPlan decode;
    decode.continuing.push_back(Continue(1));
    out.push_back(MustExecute(*executor, decode).outputs.at(0).token_id);
  }
  return out;
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// ---------------------------------------------------------------------------------------------
// Plan validation.

// Sequence 1 (greedy, 10-token prompt, blocks 0-3) and sequence 2 (seeded random, 6-token
// prompt, blocks 4-7) prefill in step 0 and decode together in steps 1-5.
StepPlan HistoryStep(int step) {
  StepPlan plan;
  plan.step_id = static_cast<uint64_t>(step);
  if (step == 0) {
    plan.new_sequences.push_back(NewSeq(1, Prompt(10), Blocks(0, 4)));
    plan.new_sequences.push_back(NewSeq(2, Prompt(6, 100), Blocks(4, 4), -1, Random(3)));
  } else {
    plan.continuing.push_back(Continue(1));
    plan.continuing.push_back(Continue(2));
  }
  return plan;
}

struct BadPlan {
  std::string name;
  StepPlan plan;
  std::string message;  // a part of the expected message
};

// Plans that break the contract, against the state after HistoryStep(0): sequence 1 has 11
// tokens with 10 computed, sequence 2 has 7 with 6 computed.
std::vector<BadPlan> BadPlans() {
  std::vector<BadPlan> bad;
  auto add = [&](std::string name, std::string message, std::function<void(StepPlan&)> fill) {
    StepPlan plan;
    fill(plan);
    bad.push_back({std::move(name), std::move(plan), std::move(message)});
  };
  add("finished unknown", "finished sequence 99 is unknown",
      [](StepPlan& p) { p.finished = {SequenceId(99)}; });
  add("finished twice", "sequence 1 finished twice", [](StepPlan& p) {
    p.finished = {SequenceId(1), SequenceId(1)};
  });
  add("new exists", "new sequence 1 already exists",
      [](StepPlan& p) { p.new_sequences.push_back(NewSeq(1, Prompt(4), Blocks(8, 1))); });
  add("new twice", "sequence 5 appears twice", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1)));
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(9, 1)));
  });
  add("continuing twice", "sequence 1 appears twice", [](StepPlan& p) {
    p.continuing.push_back(Continue(1));
    p.continuing.push_back(Continue(1));
  });
  add("new and continuing", "sequence 2 appears twice", [](StepPlan& p) {
    p.finished = {SequenceId(2)};
    p.new_sequences.push_back(NewSeq(2, Prompt(4), Blocks(8, 1)));
    p.continuing.push_back(Continue(2));
  });
  add("continuing unknown", "continuing sequence 42 is unknown",
      [](StepPlan& p) { p.continuing.push_back(Continue(42)); });
  add("continuing finished", "continuing sequence 1 is unknown", [](StepPlan& p) {
    p.finished = {SequenceId(1)};
    p.continuing.push_back(Continue(1));
  });
  add("continuing zero", "sequence 1 schedules 0 tokens after 10 of 11",
      [](StepPlan& p) { p.continuing.push_back(Continue(1, 0)); });
  add("continuing negative", "sequence 1 schedules -3 tokens",
      [](StepPlan& p) { p.continuing.push_back(Continue(1, -3)); });
  add("continuing too many", "sequence 1 schedules 2 tokens after 10 of 11",
      [](StepPlan& p) { p.continuing.push_back(Continue(1, 2)); });
  add("continuing huge", "sequence 2 schedules 2147483647 tokens",
      [](StepPlan& p) { p.continuing.push_back(Continue(2, INT32_MAX)); });
  add("new zero", "sequence 5 schedules 0 tokens after 0 of 4",
      [](StepPlan& p) { p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1), 0)); });
  add("new too many", "sequence 5 schedules 5 tokens after 0 of 4",
      [](StepPlan& p) { p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1), 5)); });
  add("new negative computed", "sequence 5 schedules 1 tokens after -1 of 4", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1), 1));
    p.new_sequences.back().num_computed_tokens = -1;
  });
  add("new computed overflow", "sequence 5 schedules 1 tokens after 2147483647 of 4",
      [](StepPlan& p) {
        p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1), 1));
        p.new_sequences.back().num_computed_tokens = INT32_MAX;
      });
  add("new scheduled overflow", "sequence 5 schedules 2147483647 tokens after 3 of 4",
      [](StepPlan& p) {
        p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1), INT32_MAX));
        p.new_sequences.back().num_computed_tokens = 3;
      });
  add("block too large", "sequence 5 names block 64 outside [0, 64)",
      [](StepPlan& p) { p.new_sequences.push_back(NewSeq(5, Prompt(4), {BlockId(64)})); });
  add("block negative", "sequence 5 names block -1 outside [0, 64)",
      [](StepPlan& p) { p.new_sequences.push_back(NewSeq(5, Prompt(4), {BlockId(-1)})); });
  add("new block of continuing", "sequence 1 names block 1000 outside [0, 64)",
      [](StepPlan& p) { p.continuing.push_back(Continue(1, 1, {BlockId(1000)})); });
  add("table too short", "sequence 5 has 1 blocks for 8 tokens",
      [](StepPlan& p) { p.new_sequences.push_back(NewSeq(5, Prompt(8), Blocks(8, 1))); });
  add("table empty", "sequence 5 has 0 blocks for 4 tokens",
      [](StepPlan& p) { p.new_sequences.push_back(NewSeq(5, Prompt(4), {})); });
  add("token too large", "sequence 5 has token 512 outside the vocabulary", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Tokens({1, 512}), Blocks(8, 1)));
  });
  add("token negative", "sequence 5 has token -1 outside the vocabulary", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Tokens({-1, 2}), Blocks(8, 1)));
  });
  add("no tokens", "new sequence 5 has no tokens",
      [](StepPlan& p) { p.new_sequences.push_back(NewSeq(5, {}, Blocks(8, 1), 1)); });
  add("prompt zero", "sequence 5 has num_prompt_tokens 0 for 4 tokens", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1)));
    p.new_sequences.back().num_prompt_tokens = 0;
  });
  add("prompt too long", "sequence 5 has num_prompt_tokens 5 for 4 tokens", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1)));
    p.new_sequences.back().num_prompt_tokens = 5;
  });
  add("longer than context", "sequence 5 has 129 tokens, more than the context of 128",
      [](StepPlan& p) { p.new_sequences.push_back(NewSeq(5, Prompt(129), Blocks(8, 16), 64)); });
  add("budget", "65 tokens exceed the step budget of 64", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(63), Blocks(8, 16)));
    p.continuing.push_back(Continue(1));
    p.continuing.push_back(Continue(2));
  });
  add("sequence cap", "5 sequences exceed the step limit of 4", [](StepPlan& p) {
    for (uint64_t id = 5; id < 8; ++id) {
      p.new_sequences.push_back(NewSeq(id, Prompt(2), Blocks(8 + id, 1)));
    }
    p.continuing.push_back(Continue(1));
    p.continuing.push_back(Continue(2));
  });
  add("temperature", "sequence 5: temperature must be a finite number >= 0", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1)));
    p.new_sequences.back().sampling.temperature = -1.0f;
  });
  add("temperature nan", "sequence 5: temperature", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1)));
    p.new_sequences.back().sampling.temperature = std::numeric_limits<float>::quiet_NaN();
  });
  add("top_p", "sequence 5: top_p must be in (0, 1]", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1)));
    p.new_sequences.back().sampling.top_p = 0.0f;
  });
  add("logprobs", "sequence 5: logprobs must be in [0, 20]", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1)));
    p.new_sequences.back().sampling.logprobs = 21;
  });
  add("prompt_logprobs", "sequence 5: prompt_logprobs", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1)));
    p.new_sequences.back().sampling.prompt_logprobs = -2;
  });
  add("logit_bias", "sequence 5: logit_bias names token 512", [](StepPlan& p) {
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1)));
    p.new_sequences.back().sampling.logit_bias = {{TokenId(512), 1.0f}};
  });
  add("copy source", "block copy 64 -> 8 is out of range", [](StepPlan& p) {
    p.block_copies = {{BlockId(64), BlockId(8)}};
  });
  add("copy destination", "block copy 8 -> -1 is out of range", [](StepPlan& p) {
    p.block_copies = {{BlockId(8), BlockId(-1)}};
  });
  // Valid parts before the fault must not be applied either: the copy would overwrite sequence
  // 1's first block with sequence 2's, and sequence 2 would be dropped.
  add("valid parts first", "continuing sequence 42 is unknown", [](StepPlan& p) {
    p.finished = {SequenceId(2)};
    p.block_copies = {{BlockId(4), BlockId(0)}};
    p.new_sequences.push_back(NewSeq(5, Prompt(4), Blocks(8, 1)));
    p.continuing.push_back(Continue(1));
    p.continuing.push_back(Continue(42));
  });
  return bad;
}

TEST(ExecutorValidationTest, BadPlansAreRefusedAndChangeNothing) {
  auto reference = MakeExecutor();
  auto executor = MakeExecutor();
  ASSERT_NE(reference, nullptr);
  ASSERT_NE(executor, nullptr);
  std::vector<StepResult> want, got;
  for (int step = 0; step < 6; ++step) want.push_back(MustExecute(*reference, HistoryStep(step)));

  got.push_back(MustExecute(*executor, HistoryStep(0)));
  for (const BadPlan& bad : BadPlans()) {
    SCOPED_TRACE(bad.name);
    absl::StatusOr<StepResult> result = executor->Execute(bad.plan);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    LOOM_EXPECT_CONTAINS(Message(result.status()), "step plan: " + bad.message);
    EXPECT_EQ(executor->num_sequences(), 2u);
  }
  for (int step = 1; step < 6; ++step) got.push_back(MustExecute(*executor, HistoryStep(step)));

  for (int step = 0; step < 6; ++step) {
    ASSERT_EQ(got[step].outputs.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(got[step].outputs[i].seq_id, want[step].outputs[i].seq_id);
      EXPECT_EQ(got[step].outputs[i].token_id, want[step].outputs[i].token_id)
          << "step " << step << " sequence " << i + 1;
      EXPECT_TRUE(got[step].outputs[i].has_token());
    }
  }
}

TEST(ExecutorValidationTest, ContinuingPastTheContextIsRefused) {
  EngineConfig config = Config();
  config.max_context_len = 12;
  auto executor = MakeExecutor(config);
  ASSERT_NE(executor, nullptr);
  EXPECT_EQ(executor->model_info().max_context_len, 12);
  StepPlan prefill;
  prefill.new_sequences.push_back(NewSeq(1, Prompt(11), Blocks(0, 4)));
  MustExecute(*executor, prefill);
  StepPlan decode;
  decode.continuing.push_back(Continue(1));
  MustExecute(*executor, decode);  // computes position 11: 12 tokens, the whole context
  absl::StatusOr<StepResult> past = executor->Execute(decode);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(Message(past.status()),
                       "sequence 1 would reach 13 tokens, more than the context of 12");
  StepPlan too_long;
  too_long.new_sequences.push_back(NewSeq(2, Prompt(13), Blocks(4, 4), 1));
  LOOM_EXPECT_CONTAINS(Message(executor->Execute(too_long).status()),
                       "sequence 2 has 13 tokens, more than the context of 12");
  StepPlan finish;
  finish.finished = {SequenceId(1)};
  MustExecute(*executor, finish);
  EXPECT_EQ(executor->num_sequences(), 0u);
}

TEST(ExecutorValidationTest, EmptyPlansAreFine) {
  auto executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  StepPlan empty;
  empty.step_id = 7;
  StepResult result = MustExecute(*executor, empty);
  EXPECT_EQ(result.step_id, 7u);
  EXPECT_TRUE(result.outputs.empty());
  EXPECT_EQ(result.num_tokens_computed, 0);
}

// engine/api/executor.h: the mark of a failure after the engine state changed carries the
// sequences it touched; unmarked errors and OK carry nothing.
TEST(ExecutorMarksTest, AStepAppliedFailureNamesTheSequencesItTouched) {
  const std::vector<SequenceId> touched = {SequenceId(7), SequenceId(12345678901234)};
  const absl::Status marked = MarkStepApplied(absl::InternalError("late"), touched);
  EXPECT_EQ(marked.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(StepAppliedTouched(marked), touched);
  const absl::Status none = MarkStepApplied(absl::InternalError("late"), {});
  ASSERT_TRUE(StepAppliedTouched(none).has_value());
  EXPECT_TRUE(StepAppliedTouched(none)->empty());
  EXPECT_FALSE(StepAppliedTouched(absl::InternalError("refused")).has_value());
  EXPECT_TRUE(MarkStepApplied(absl::OkStatus(), touched).ok());
  EXPECT_FALSE(IsFatalDeviceError(marked));
}

// A device failure after the forward pass (a fault injected where Synchronize reports one) in a
// step that releases a sequence, admits one and continues one: the step is reported as not run,
// unmarked (nothing was applied), and every sequence is as it was, so the same plan can be sent
// again and the tokens are those of a run without the fault.
TEST(ExecutorValidationTest, AStepThatFailsOnTheDeviceChangesNothing) {
  auto executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  int num_faults = 1;
  executor->SetFaultInjectorForTesting([&](uint64_t step_id) {
    if (step_id != 2 || num_faults == 0) return absl::OkStatus();
    --num_faults;
    return absl::InternalError("injected device fault");
  });
  std::vector<TokenId> tokens;
  tokens.push_back(MustExecute(*executor, HistoryStep(0)).outputs.at(0).token_id);
  tokens.push_back(MustExecute(*executor, HistoryStep(1)).outputs.at(0).token_id);
  StepPlan step;
  step.step_id = 2;
  step.finished = {SequenceId(2)};
  step.new_sequences.push_back(NewSeq(3, Prompt(5, 200), Blocks(8, 2)));
  step.continuing.push_back(Continue(1));
  const absl::StatusOr<StepResult> failed = executor->Execute(step);
  ASSERT_FALSE(failed.ok());
  LOOM_EXPECT_CONTAINS(Message(failed.status()), "injected device fault");
  EXPECT_FALSE(StepAppliedTouched(failed.status()).has_value());
  EXPECT_EQ(executor->num_sequences(), 2u);
  // Sent again, the plan runs as if the failure had never happened.
  const StepResult again = MustExecute(*executor, step);
  EXPECT_EQ(again.step_id, 2u);
  ASSERT_EQ(again.outputs.size(), 2u);
  EXPECT_EQ(again.outputs[0].token_id, AloneTokens(Prompt(5, 200), 1).at(0));
  tokens.push_back(again.outputs[1].token_id);
  StepPlan decode;
  decode.step_id = 3;
  decode.continuing.push_back(Continue(1));
  tokens.push_back(MustExecute(*executor, decode).outputs.at(0).token_id);
  EXPECT_EQ(tokens, AloneTokens(Prompt(10), 4));
  EXPECT_EQ(num_faults, 0);
}

// ---------------------------------------------------------------------------------------------
// Results.

TEST(ExecutorTest, OutputsFollowPlanOrderAndChunksReportNoToken) {
  auto executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  StepPlan first;
  first.new_sequences.push_back(NewSeq(7, Prompt(5), Blocks(0, 2)));
  MustExecute(*executor, first);
  StepPlan second;
  second.step_id = 1;
  second.new_sequences.push_back(NewSeq(3, Prompt(9, 50), Blocks(2, 3), 4));  // a chunk
  second.continuing.push_back(Continue(7));
  const StepResult result = MustExecute(*executor, second);
  EXPECT_EQ(result.step_id, 1u);
  EXPECT_EQ(result.num_tokens_computed, 5);
  ASSERT_EQ(result.outputs.size(), 2u);
  EXPECT_EQ(result.outputs[0].seq_id, SequenceId(3));
  EXPECT_FALSE(result.outputs[0].has_token());
  EXPECT_EQ(result.outputs[1].seq_id, SequenceId(7));
  EXPECT_TRUE(result.outputs[1].has_token());
  EXPECT_GE(result.outputs[1].token_id.value(), 0);
  EXPECT_LT(result.outputs[1].token_id.value(), kVocab);
}

// Copy-on-write: sequence 2 has sequence 1's prompt. It shares 1's first (full) block, gets a
// copy of 1's second (partial) block in a block that held another sequence's K/V, and computes
// only its last prompt token. Both then decode side by side and give the tokens of the prompt
// alone.
TEST(ExecutorTest, BlockCopySharesAPrefix) {
  const std::vector<TokenId> prompt = Prompt(6);
  const std::vector<TokenId> want = AloneTokens(prompt, 8);
  ASSERT_EQ(want.size(), 8u);

  for (const bool copy : {true, false}) {
    SCOPED_TRACE(copy ? "with the copy" : "without the copy");
    auto executor = MakeExecutor();
    ASSERT_NE(executor, nullptr);
    std::map<std::pair<uint64_t, int32_t>, std::vector<float>> logits;
    executor->SetLogitsObserver([&](SequenceId id, int32_t position, std::span<const float> row) {
      logits[{id.value(), position}].assign(row.begin(), row.end());
    });
    StepPlan junk;  // leaves other K/V in blocks 10 and 11
    junk.new_sequences.push_back(NewSeq(9, Prompt(8, 200), {BlockId(10), BlockId(11)}));
    MustExecute(*executor, junk);
    StepPlan first;
    first.finished = {SequenceId(9)};
    first.new_sequences.push_back(NewSeq(1, prompt, Blocks(0, 4)));
    std::vector<TokenId> tokens1 = {MustExecute(*executor, first).outputs.at(0).token_id};

    StepPlan share;
    if (copy) share.block_copies = {{BlockId(1), BlockId(11)}};
    NewSequencePlan second =
        NewSeq(2, prompt, {BlockId(0), BlockId(11), BlockId(12), BlockId(13)}, 1);
    second.num_computed_tokens = 5;
    share.new_sequences.push_back(second);
    share.continuing.push_back(Continue(1));
    StepResult shared = MustExecute(*executor, share);
    std::vector<TokenId> tokens2 = {shared.outputs.at(0).token_id};
    tokens1.push_back(shared.outputs.at(1).token_id);
    // Sequence 2's logits at position 5 are sequence 1's only if the copied K/V are right.
    const float diff = test::MaxAbsDiff(logits[{2, 5}], logits[{1, 5}]);
    if (!copy) {
      EXPECT_GT(diff, 1e-3f) << "block 11's old contents do not matter: the test proves nothing";
      continue;
    }
    EXPECT_LE(diff, 1e-5f);
    for (int step = 0; step < 6; ++step) {
      StepPlan decode;
      decode.continuing.push_back(Continue(1));
      decode.continuing.push_back(Continue(2));
      StepResult result = MustExecute(*executor, decode);
      tokens1.push_back(result.outputs.at(0).token_id);
      tokens2.push_back(result.outputs.at(1).token_id);
    }
    EXPECT_EQ(tokens1, want);
    EXPECT_EQ(tokens2, std::vector<TokenId>(want.begin(), want.begin() + 7));
  }
}

// A block copied onto itself is a no-op (not an overlapping memcpy).
TEST(ExecutorTest, BlockCopyOntoItself) {
  const std::vector<TokenId> prompt = Prompt(6);
  const std::vector<TokenId> want = AloneTokens(prompt, 3);
  auto executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  StepPlan plan;
  plan.new_sequences.push_back(NewSeq(1, prompt, Blocks(0, 4)));
  std::vector<TokenId> got = {MustExecute(*executor, plan).outputs.at(0).token_id};
  for (int i = 0; i < 2; ++i) {
    plan = StepPlan();
    plan.block_copies = {{BlockId(0), BlockId(0)}, {BlockId(1), BlockId(1)}};
    plan.continuing.push_back(Continue(1));
    got.push_back(MustExecute(*executor, plan).outputs.at(0).token_id);
  }
  EXPECT_EQ(got, want);
}

// Logit rows go through the LM head in chunks of max_logit_rows: prompt log-probabilities and
// samples of several sequences come out the same with chunks of 3 rows as in one chunk.
TEST(ExecutorTest, LogitRowsInChunks) {
  auto run = [](int32_t max_logit_rows) {
    EngineConfig config = Config();
    config.max_logit_rows = max_logit_rows;
    auto executor = MakeExecutor(config);
    std::vector<SequenceOutput> outputs;
    if (executor == nullptr) return outputs;
    SamplingParams scored = Greedy();
    scored.prompt_logprobs = 1;
    scored.logprobs = 2;
    StepPlan plan;
    plan.new_sequences.push_back(NewSeq(1, Prompt(10), Blocks(0, 4), -1, scored));
    plan.new_sequences.push_back(NewSeq(2, Prompt(4, 77), Blocks(4, 4), -1, Random(5)));
    plan.new_sequences.push_back(NewSeq(3, Prompt(7, 78), Blocks(8, 4), -1, scored));
    for (const SequenceOutput& out : MustExecute(*executor, plan).outputs) outputs.push_back(out);
    return outputs;
  };
  const std::vector<SequenceOutput> one = run(256), chunked = run(3);
  ASSERT_EQ(one.size(), 3u);
  ASSERT_EQ(chunked.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(chunked[i].token_id, one[i].token_id);
    ASSERT_EQ(chunked[i].prompt_logprobs.size(), one[i].prompt_logprobs.size());
    EXPECT_EQ(chunked[i].prompt_logprobs_start, one[i].prompt_logprobs_start);
    for (size_t p = 0; p < one[i].prompt_logprobs.size(); ++p) {
      EXPECT_EQ(chunked[i].prompt_logprobs[p].token.token_id,
                one[i].prompt_logprobs[p].token.token_id);
      EXPECT_NEAR(chunked[i].prompt_logprobs[p].token.logprob,
                  one[i].prompt_logprobs[p].token.logprob, 1e-5);
      EXPECT_EQ(chunked[i].prompt_logprobs[p].rank, one[i].prompt_logprobs[p].rank);
    }
    ASSERT_EQ(chunked[i].logprobs.size(), one[i].logprobs.size());
  }
  EXPECT_EQ(one[0].prompt_logprobs.size(), 9u);
  EXPECT_EQ(one[2].prompt_logprobs.size(), 6u);
  EXPECT_TRUE(one[1].prompt_logprobs.empty());
}

// log-softmax of `logits` at `token`, in double.
double LogSoftmax(const std::vector<float>& logits, int32_t token) {
  double max = -std::numeric_limits<double>::infinity();
  for (float v : logits) max = std::max(max, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(v - max);
  return logits[token] - max - std::log(sum);
}

int32_t RankOf(const std::vector<float>& logits, int32_t token) {
  int32_t rank = 1;
  for (int32_t v = 0; v < static_cast<int32_t>(logits.size()); ++v) {
    if (logits[v] > logits[token] || (logits[v] == logits[token] && v < token)) ++rank;
  }
  return rank;
}

// Checks one reported position against the raw logits the observer saw for it.
void ExpectLogprobsMatch(const PositionLogprobs& got, const std::vector<float>& logits,
                         int32_t token, int32_t num_top) {
  ASSERT_EQ(static_cast<int32_t>(logits.size()), kVocab);
  EXPECT_EQ(got.token.token_id, TokenId(token));
  EXPECT_NEAR(got.token.logprob, LogSoftmax(logits, token), 1e-5);
  EXPECT_EQ(got.rank, RankOf(logits, token));
  ASSERT_EQ(static_cast<int32_t>(got.top.size()), num_top);
  for (int32_t i = 0; i < num_top; ++i) {
    EXPECT_EQ(RankOf(logits, got.top[i].token_id.value()), i + 1);
    EXPECT_NEAR(got.top[i].logprob, LogSoftmax(logits, got.top[i].token_id.value()), 1e-5);
  }
}

TEST(ExecutorTest, PromptLogprobsInOneStepAndInChunks) {
  const std::vector<TokenId> prompt = Prompt(10);
  for (const std::vector<int32_t>& chunks :
       {std::vector<int32_t>{10}, std::vector<int32_t>{4, 4, 2}, std::vector<int32_t>{9, 1},
        std::vector<int32_t>{1, 8, 1}}) {
    SCOPED_TRACE(::testing::PrintToString(chunks));
    auto executor = MakeExecutor();
    ASSERT_NE(executor, nullptr);
    std::map<int32_t, std::vector<float>> logits;
    executor->SetLogitsObserver([&](SequenceId, int32_t position, std::span<const float> row) {
      logits[position].assign(row.begin(), row.end());
    });
    SamplingParams params = Greedy();
    params.prompt_logprobs = 2;
    std::vector<PositionLogprobs> entries;
    int32_t done = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      StepPlan plan;
      if (c == 0) {
        plan.new_sequences.push_back(NewSeq(1, prompt, Blocks(0, 4), chunks[c], params));
      } else {
        plan.continuing.push_back(Continue(1, chunks[c]));
      }
      const SequenceOutput out = MustExecute(*executor, plan).outputs.at(0);
      // Positions [done, min(done + chunk, 9)) score the next prompt token.
      const int32_t expected = std::max(0, std::min(done + chunks[c], 9) - done);
      EXPECT_EQ(static_cast<int32_t>(out.prompt_logprobs.size()), expected) << "chunk " << c;
      if (expected > 0) {
        EXPECT_EQ(out.prompt_logprobs_start, done) << "chunk " << c;
      }
      EXPECT_TRUE(out.logprobs.empty());  // not asked for
      EXPECT_EQ(out.has_token(), c + 1 == chunks.size());
      entries.insert(entries.end(), out.prompt_logprobs.begin(), out.prompt_logprobs.end());
      done += chunks[c];
    }
    ASSERT_EQ(entries.size(), 9u);
    for (int32_t p = 0; p < 9; ++p) {
      SCOPED_TRACE(p);
      ASSERT_TRUE(logits.count(p));
      ExpectLogprobsMatch(entries[p], logits[p], prompt[p + 1].value(), 2);
    }
    // A decode step has no prompt position left.
    StepPlan decode;
    decode.continuing.push_back(Continue(1));
    EXPECT_TRUE(MustExecute(*executor, decode).outputs.at(0).prompt_logprobs.empty());
  }
}

// A sequence resumed after preemption carries generated tokens after its prompt: only prompt
// positions with a prompt successor are scored.
TEST(ExecutorTest, PromptLogprobsStopAtTheEndOfThePrompt) {
  auto executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  NewSequencePlan plan = NewSeq(1, Prompt(9), Blocks(0, 3));
  plan.num_prompt_tokens = 6;
  plan.sampling.prompt_logprobs = 0;
  StepPlan step;
  step.new_sequences.push_back(plan);
  const SequenceOutput out = MustExecute(*executor, step).outputs.at(0);
  EXPECT_EQ(out.prompt_logprobs.size(), 5u);
  EXPECT_EQ(out.prompt_logprobs_start, 0);
  for (const PositionLogprobs& entry : out.prompt_logprobs) EXPECT_TRUE(entry.top.empty());
}

TEST(ExecutorTest, SampledLogprobsOnlyWhenAsked) {
  auto executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  std::map<std::pair<uint64_t, int32_t>, std::vector<float>> logits;
  executor->SetLogitsObserver([&](SequenceId id, int32_t position, std::span<const float> row) {
    logits[{id.value(), position}].assign(row.begin(), row.end());
  });
  StepPlan plan;
  for (const int32_t num : {-1, 0, 3}) {
    SamplingParams params = Greedy();
    params.logprobs = num;
    plan.new_sequences.push_back(
        NewSeq(10 + num, Prompt(5, 9 + num), Blocks(4 * (num + 1), 2), -1, params));
  }
  for (int step = 0; step < 3; ++step) {
    const StepResult result = MustExecute(*executor, plan);
    ASSERT_EQ(result.outputs.size(), 3u);
    EXPECT_TRUE(result.outputs[0].logprobs.empty());
    for (int i = 1; i < 3; ++i) {
      const SequenceOutput& out = result.outputs[i];
      ASSERT_EQ(out.logprobs.size(), 1u);
      EXPECT_TRUE(out.prompt_logprobs.empty());
      EXPECT_EQ(out.logprobs[0].rank, 1);  // greedy takes the most likely token
      ExpectLogprobsMatch(out.logprobs[0], logits[{out.seq_id.value(), 4 + step}],
                          out.token_id.value(), i == 1 ? 0 : 3);
    }
    plan = StepPlan();
    for (const uint64_t id : {9, 10, 13}) plan.continuing.push_back(Continue(id));
  }
}

// ---------------------------------------------------------------------------------------------
// Sequence lifetime and sampling.

TEST(ExecutorTest, FinishedIdsCanBeReused) {
  const std::vector<TokenId> first = Prompt(7, 11), second = Prompt(5, 300);
  const std::vector<TokenId> want = AloneTokens(second, 4);
  auto executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  StepPlan plan;
  plan.new_sequences.push_back(NewSeq(1, first, Blocks(0, 2)));
  MustExecute(*executor, plan);
  // Finished and new again in the same plan, in other blocks.
  plan = StepPlan();
  plan.finished = {SequenceId(1)};
  plan.new_sequences.push_back(NewSeq(1, second, Blocks(8, 2)));
  std::vector<TokenId> got = {MustExecute(*executor, plan).outputs.at(0).token_id};
  for (int i = 0; i < 3; ++i) {
    plan = StepPlan();
    plan.continuing.push_back(Continue(1));
    got.push_back(MustExecute(*executor, plan).outputs.at(0).token_id);
  }
  EXPECT_EQ(got, want);
  // Finished in one plan, new in a later one.
  plan = StepPlan();
  plan.finished = {SequenceId(1)};
  MustExecute(*executor, plan);
  EXPECT_EQ(executor->num_sequences(), 0u);
  plan = StepPlan();
  plan.new_sequences.push_back(NewSeq(1, second, Blocks(0, 2)));
  EXPECT_EQ(MustExecute(*executor, plan).outputs.at(0).token_id, want[0]);
  EXPECT_EQ(executor->num_sequences(), 1u);
}

TEST(ExecutorTest, SeededSamplingDoesNotDependOnTheBatch) {
  const std::vector<TokenId> prompt = Prompt(8, 21);
  const std::vector<TokenId> alone = AloneTokens(prompt, 10, Random(1234));
  ASSERT_EQ(alone.size(), 10u);
  // Same seed, batched with two other random sequences, prefilled in two chunks, under another
  // sequence id.
  auto executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  StepPlan plan;
  plan.new_sequences.push_back(NewSeq(1, Prompt(12, 5), Blocks(0, 6), -1, Random(1)));
  plan.new_sequences.push_back(NewSeq(77, prompt, Blocks(6, 6), 5, Random(1234)));
  plan.new_sequences.push_back(NewSeq(3, Prompt(3, 400), Blocks(12, 6), -1, Random(1234 + 1)));
  MustExecute(*executor, plan);
  std::vector<TokenId> batched, neighbour;
  for (int step = 0; step < 10; ++step) {
    plan = StepPlan();
    plan.continuing.push_back(Continue(1));
    plan.continuing.push_back(Continue(77, step == 0 ? 3 : 1));
    plan.continuing.push_back(Continue(3));
    const StepResult result = MustExecute(*executor, plan);
    batched.push_back(result.outputs.at(1).token_id);
    neighbour.push_back(result.outputs.at(2).token_id);
  }
  EXPECT_EQ(batched, alone);
  // Another seed draws other tokens (the chance of ten equal draws is negligible).
  EXPECT_NE(AloneTokens(prompt, 10, Random(99)), alone);
}

// The weights read in place from the file's mapping or from a copy in anonymous memory: the
// same bytes, so the same seeded draws.
TEST(ExecutorTest, WeightsFromTheFileOrACopyGiveTheSameTokens) {
  const std::vector<TokenId> prompt = Prompt(9, 40);
  EngineConfig from_file = Config();
  from_file.weight_memory = WeightMemory::kFile;
  EngineConfig from_copy = Config();
  from_copy.weight_memory = WeightMemory::kAnonymous;
  const std::vector<TokenId> file_tokens = AloneTokens(prompt, 12, Random(7), from_file);
  ASSERT_EQ(file_tokens.size(), 12u);
  EXPECT_EQ(AloneTokens(prompt, 12, Random(7), from_copy), file_tokens);
}

}  // namespace
}  // namespace loom
