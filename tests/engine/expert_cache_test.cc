// The expert cache is lossless: on the mixture-of-experts golden checkpoints, a LocalExecutor whose
// routed experts live in the file behind an ExpertStore (EngineConfig::expert_cache_bytes)
// produces exactly the tokens and log-probabilities of the all-resident one, whatever the cache
// size (one slot, a few, all) and whatever prefetch hints and scores the plans carry (none,
// random, the experts the step will need); its counters add up; and it is refused where it cannot
// run.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/runtime/local_executor.h"
#include "tests/engine/moe_golden.h"

namespace loom {
namespace {

constexpr int32_t kDecodeSteps = 12;

std::vector<std::vector<TokenId>> LoadPrompts(const std::string& model) {
  std::vector<std::vector<TokenId>> out;
  const Json prompts = testing::GoldenPrompts(model);
  for (size_t i = 0; i < prompts.size(); ++i) out.push_back(testing::PromptTokens(prompts[i]));
  return out;
}

absl::StatusOr<std::unique_ptr<LocalExecutor>> MakeExecutor(const std::string& model,
                                                            int64_t expert_cache_bytes,
                                                            bool direct_io = true) {
  EngineConfig config = testing::GoldenMoeConfig(model);
  config.expert_cache_bytes = expert_cache_bytes;
  config.expert_direct_io = direct_io;
  return LocalExecutor::Create(config);
}

enum class Hints { kNone, kRandom, kAll };

// What a run produced: per step and sequence, the token and its top log-probabilities.
struct Trace {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  ExpertCacheCounters counters;
};

Trace RunSteps(LocalExecutor& executor, const std::vector<std::vector<TokenId>>& prompts, Hints hints,
          uint32_t seed) {
  Trace trace;
  const ModelInfo& info = executor.model_info();
  std::mt19937 rng(seed);
  auto add_hints = [&](StepPlan& plan) {
    if (hints == Hints::kNone) return;
    // Plans name sparse layers by their position among the sparse layers.
    int32_t sparse = 0;
    for (bool s : info.sparse_layers) sparse += s;
    for (int32_t l = 0; l < sparse; ++l) {
      for (int32_t e = 0; e < info.num_experts; ++e) {
        if (hints == Hints::kRandom && rng() % 3 != 0) continue;
        const double urgency = static_cast<double>(rng() % 1000) / 100.0;
        plan.expert_prefetch.push_back({{l, e}, urgency});
        plan.expert_scores.push_back({{l, e}, urgency});
      }
    }
  };
  StepPlan plan;
  plan.step_id = 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    NewSequencePlan s;
    s.seq_id = SequenceId(i + 1);
    s.token_ids = prompts[i];
    s.num_prompt_tokens = static_cast<int32_t>(prompts[i].size());
    s.num_scheduled_tokens = s.num_prompt_tokens;
    for (int32_t b = 0; b < 12; ++b) s.block_table.push_back(BlockId(int32_t(i) * 12 + b));
    s.sampling.temperature = 0.0f;
    s.sampling.logprobs = 3;
    plan.new_sequences.push_back(std::move(s));
  }
  add_hints(plan);
  for (int32_t step = 0; step <= kDecodeSteps; ++step) {
    absl::StatusOr<StepResult> result = executor.Execute(plan);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return trace;
    for (const SequenceOutput& out : result->outputs) {
      trace.tokens.push_back(out.token_id.value());
      for (const PositionLogprobs& p : out.logprobs) {
        trace.logprobs.push_back(p.token.logprob);
        for (const TokenLogprob& t : p.top) trace.logprobs.push_back(t.logprob);
      }
    }
    trace.counters = result->expert_cache;
    plan = StepPlan();
    plan.step_id = static_cast<uint64_t>(step) + 2;
    for (size_t i = 0; i < prompts.size(); ++i) plan.continuing.push_back({SequenceId(i + 1), {}, 1});
    add_hints(plan);
  }
  return trace;
}

class ExpertCacheTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertCacheTest, OutputsAreIdenticalWhateverTheCacheSizeAndHints) {
  const std::vector<std::vector<TokenId>> prompts = LoadPrompts(GetParam());
  ASSERT_FALSE(prompts.empty());
  absl::StatusOr<std::unique_ptr<LocalExecutor>> resident = MakeExecutor(GetParam(), 0);
  ASSERT_TRUE(resident.ok()) << resident.status();
  EXPECT_EQ((*resident)->capacity().expert_cache_slots, 0);
  const Trace want = RunSteps(**resident, prompts, Hints::kNone, 1);
  ASSERT_FALSE(want.tokens.empty());
  EXPECT_EQ(want.counters.slots, 0) << "no cache, no counters";

  // The slot size, from a one-slot store.
  absl::StatusOr<std::unique_ptr<LocalExecutor>> probe = MakeExecutor(GetParam(), 1);
  ASSERT_TRUE(probe.ok()) << probe.status();
  const int64_t slot = (*probe)->capacity().expert_slot_bytes;
  ASSERT_GT(slot, 0);
  const ModelInfo& info = (*resident)->model_info();
  int32_t sparse = 0;
  for (bool s : info.sparse_layers) sparse += s;
  const int32_t all = sparse * info.num_experts;

  struct Case {
    int32_t slots;
    Hints hints;
    bool direct_io;
  };
  const Case cases[] = {{1, Hints::kNone, true},   {1, Hints::kRandom, true},
                        {2, Hints::kAll, true},    {3, Hints::kRandom, false},
                        {all / 2, Hints::kRandom, true}, {all, Hints::kAll, true}};
  for (const Case& c : cases) {
    const std::string what = "slots " + std::to_string(c.slots) + " hints " +
                             std::to_string(static_cast<int>(c.hints)) +
                             (c.direct_io ? "" : " buffered");
    absl::StatusOr<std::unique_ptr<LocalExecutor>> cached =
        MakeExecutor(GetParam(), c.slots * slot, c.direct_io);
    ASSERT_TRUE(cached.ok()) << cached.status() << " " << what;
    EXPECT_EQ((*cached)->capacity().expert_cache_slots, c.slots) << what;
    const Trace got = RunSteps(**cached, prompts, c.hints, 7 + static_cast<uint32_t>(c.slots));
    EXPECT_EQ(got.tokens, want.tokens) << what;
    EXPECT_EQ(got.logprobs, want.logprobs) << what << ": the bytes are the same, so the floats are";
    const ExpertCacheCounters& n = got.counters;
    EXPECT_EQ(n.slots, c.slots) << what;
    EXPECT_LE(n.resident, c.slots) << what;
    EXPECT_GT(n.hits + n.misses, 0) << what;
    EXPECT_GT(n.bytes_loaded, 0) << what;
    EXPECT_LE(n.prefetches_used + n.prefetches_wasted, n.prefetches_issued) << what;
    if (c.hints == Hints::kNone) {
      EXPECT_EQ(n.prefetches_issued, 0) << what;
    }
    if (c.slots == all && c.hints == Hints::kAll) {
      EXPECT_GT(n.prefetches_used, 0) << what << ": hinting everything must pay off somewhere";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ExpertCacheTest,
                         ::testing::Values("mixtral", "qwen2_moe", "qwen3_moe",
                                           // GGUF: experts are rows of the stacked tensors.
                                           "gguf_mixtral_f16", "gguf_qwen2_moe_f16",
                                           "gguf_qwen3_moe_q8_0"));

TEST(ExpertCacheConfigTest, DenseModelsIgnoreTheBudget) {
  absl::StatusOr<std::unique_ptr<LocalExecutor>> dense = MakeExecutor("llama2_mha", 1 << 20);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ((*dense)->capacity().expert_cache_slots, 0);
}

}  // namespace
}  // namespace loom
