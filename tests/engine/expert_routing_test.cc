// Expert routing counts (StepPlan::report_expert_routing -> SequenceOutput::expert_counts) of the
// LocalExecutor on the mixture-of-experts golden checkpoints: each prompt's counts, prefilled in
// one batch, equal what transformers' routers chose for it (recorded by make_golden.py as
// prompts[i].expert_counts); decode steps count top_k per sparse layer and nothing for dense
// layers; nothing is reported unless asked, or for a dense model.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "engine/runtime/local_executor.h"
#include "tests/engine/moe_golden.h"

namespace loom {
namespace {

struct RecordedPrompt {
  std::vector<TokenId> tokens;
  std::vector<int32_t> expert_counts;  // [num_layers * num_experts]
};

std::vector<RecordedPrompt> LoadPrompts(const std::string& model) {
  std::vector<RecordedPrompt> out;
  const Json prompts = testing::GoldenPrompts(model);
  for (size_t i = 0; i < prompts.size(); ++i) {
    RecordedPrompt p;
    p.tokens = testing::PromptTokens(prompts[i]);
    const Json layers = *prompts[i].Get("expert_counts");
    for (size_t l = 0; l < layers.size(); ++l) {
      for (size_t e = 0; e < layers[l].size(); ++e) {
        p.expert_counts.push_back(int32_t(*layers[l][e].AsInt()));
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::unique_ptr<LocalExecutor> MakeExecutor(const std::string& model) {
  EngineConfig config = testing::GoldenMoeConfig(model);
  config.num_kv_blocks = 64;
  config.max_num_batched_tokens = 128;
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor = LocalExecutor::Create(config);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return executor.ok() ? std::move(*executor) : nullptr;
}

NewSequencePlan NewSeq(uint64_t id, const std::vector<TokenId>& tokens, int32_t first_block) {
  NewSequencePlan plan;
  plan.seq_id = SequenceId(id);
  plan.token_ids = tokens;
  plan.num_prompt_tokens = static_cast<int32_t>(tokens.size());
  plan.num_scheduled_tokens = plan.num_prompt_tokens;
  for (int32_t b = 0; b < 10; ++b) plan.block_table.push_back(BlockId(first_block + b));
  plan.sampling.temperature = 0.0f;
  return plan;
}

class ExpertRoutingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertRoutingTest, PrefillCountsMatchTransformersRouters) {
  const std::vector<RecordedPrompt> prompts = LoadPrompts(GetParam());
  ASSERT_FALSE(prompts.empty());
  auto executor = MakeExecutor(GetParam());
  ASSERT_NE(executor, nullptr);
  const ModelInfo& info = executor->model_info();
  ASSERT_GT(info.num_experts, 0);
  ASSERT_EQ(info.sparse_layers.size(), size_t(info.num_layers));

  StepPlan plan;
  plan.step_id = 1;
  plan.report_expert_routing = true;
  for (size_t i = 0; i < prompts.size(); ++i) {
    plan.new_sequences.push_back(NewSeq(i + 1, prompts[i].tokens, int32_t(i) * 10));
  }
  absl::StatusOr<StepResult> result = executor->Execute(plan);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->outputs.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(result->outputs[i].expert_counts, prompts[i].expert_counts) << "prompt " << i;
  }

  // One decode step, not asked: nothing counted.
  StepPlan quiet;
  quiet.step_id = 2;
  for (size_t i = 0; i < prompts.size(); ++i) {
    quiet.continuing.push_back({SequenceId(i + 1), {}, 1});
  }
  result = executor->Execute(quiet);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const SequenceOutput& out : result->outputs) EXPECT_TRUE(out.expert_counts.empty());

  // A decode step that asks: each sequence's one token counts top_k times per sparse layer.
  quiet.step_id = 3;
  quiet.report_expert_routing = true;
  result = executor->Execute(quiet);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const SequenceOutput& out : result->outputs) {
    ASSERT_EQ(out.expert_counts.size(), size_t(info.num_layers) * info.num_experts);
    for (int32_t l = 0; l < info.num_layers; ++l) {
      const auto row = out.expert_counts.begin() + l * info.num_experts;
      const int32_t sum = std::accumulate(row, row + info.num_experts, 0);
      EXPECT_EQ(sum, info.sparse_layers[l] ? info.num_experts_per_tok : 0) << "layer " << l;
      for (int32_t e = 0; e < info.num_experts; ++e) EXPECT_LE(row[e], 1);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ExpertRoutingTest,
                         ::testing::Values("mixtral", "qwen2_moe", "qwen3_moe"));

TEST(ExpertRoutingDenseTest, DenseModelReportsNothing) {
  auto executor = MakeExecutor("llama2_mha");
  ASSERT_NE(executor, nullptr);
  EXPECT_EQ(executor->model_info().num_experts, 0);
  StepPlan plan;
  plan.step_id = 1;
  plan.report_expert_routing = true;
  plan.new_sequences.push_back(NewSeq(1, {TokenId(5), TokenId(9), TokenId(11)}, 0));
  absl::StatusOr<StepResult> result = executor->Execute(plan);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->outputs.at(0).expert_counts.empty());
}

}  // namespace
}  // namespace loom
