// Which requests the device sampler takes (DeviceSamplingSupports) and how a sequence's
// SamplingParams and token lists are packed into its row and the penalty id array.
#include "engine/sampling/device_sampling_params.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

std::vector<TokenId> Ids(std::initializer_list<int32_t> values) {
  std::vector<TokenId> ids;
  for (int32_t v : values) ids.push_back(TokenId(v));
  return ids;
}

TEST(DeviceSamplingParamsTest, SupportsPlainSamplingAndPenalties) {
  SamplingParams params;
  EXPECT_TRUE(DeviceSamplingSupports(params));
  params.temperature = 0.0f;
  params.top_k = 5;
  params.top_p = 0.5f;
  params.min_p = 0.1f;
  params.repetition_penalty = 1.3f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = -0.5f;
  params.seed = 99;
  params.prompt_logprobs = 3;  // prompt positions only: not the sampler's concern
  EXPECT_TRUE(DeviceSamplingSupports(params));
  EXPECT_TRUE(DeviceSamplingSupports(params, 0));
}

TEST(DeviceSamplingParamsTest, RejectsLogprobsAndLogitBias) {
  SamplingParams params;
  params.logprobs = 0;
  EXPECT_FALSE(DeviceSamplingSupports(params));
  EXPECT_FALSE(DeviceSamplingSupports(params, 100));
  params.logprobs = -1;
  params.logit_bias = {{TokenId(3), 1.0f}};
  EXPECT_FALSE(DeviceSamplingSupports(params));
  EXPECT_FALSE(DeviceSamplingSupports(params, 100));
}

TEST(DeviceSamplingParamsTest, MinTokensBanOnlyWhileActive) {
  SamplingParams params;
  params.min_tokens = 3;
  EXPECT_TRUE(DeviceSamplingSupports(params));  // nothing banned
  params.min_tokens_banned_ids = Ids({2});
  EXPECT_FALSE(DeviceSamplingSupports(params));
  EXPECT_FALSE(DeviceSamplingSupports(params, 0));
  EXPECT_FALSE(DeviceSamplingSupports(params, 2));
  EXPECT_TRUE(DeviceSamplingSupports(params, 3));
  EXPECT_TRUE(DeviceSamplingSupports(params, 10));
  params.min_tokens = 0;
  EXPECT_TRUE(DeviceSamplingSupports(params));
}

TEST(DeviceSamplingParamsTest, PacksFieldsAndIndex) {
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 40;
  params.top_p = 0.9f;
  params.min_p = 0.05f;
  params.seed = 0xFEEDFACECAFEBEEFull;
  const std::vector<TokenId> prompt = Ids({1, 2, 3});
  const std::vector<TokenId> output = Ids({4, 5});
  std::vector<int32_t> ids = {77};  // earlier rows' ids
  const DeviceSamplingRow row = PackDeviceSamplingRow({&params, prompt, output}, &ids);
  EXPECT_EQ(row.temperature, 0.7f);
  EXPECT_EQ(row.top_k, 40);
  EXPECT_EQ(row.top_p, 0.9f);
  EXPECT_EQ(row.min_p, 0.05f);
  EXPECT_EQ(row.seed, 0xFEEDFACECAFEBEEFull);
  EXPECT_EQ(row.output_index, 2);
  // No penalty: no ids needed.
  EXPECT_EQ(row.repetition_penalty, 1.0f);
  EXPECT_EQ(row.num_prompt_tokens, 0);
  EXPECT_EQ(row.num_output_tokens, 0);
  EXPECT_EQ(ids, std::vector<int32_t>({77}));
}

TEST(DeviceSamplingParamsTest, PacksPenaltyIds) {
  const std::vector<TokenId> prompt = Ids({5, 5, -1, 9});
  const std::vector<TokenId> output = Ids({9, 9, 100000});
  std::vector<int32_t> ids;

  SamplingParams repetition;
  repetition.repetition_penalty = 1.2f;
  DeviceSamplingRow row = PackDeviceSamplingRow({&repetition, prompt, output}, &ids);
  EXPECT_EQ(row.penalty_begin, 0);
  EXPECT_EQ(row.num_prompt_tokens, 4);
  EXPECT_EQ(row.num_output_tokens, 3);
  EXPECT_EQ(row.repetition_penalty, 1.2f);
  EXPECT_EQ(ids, std::vector<int32_t>({5, 5, -1, 9, 9, 9, 100000}));

  // Frequency/presence look at the output only: the prompt is not copied.
  SamplingParams additive;
  additive.frequency_penalty = 0.5f;
  additive.presence_penalty = 0.25f;
  row = PackDeviceSamplingRow({&additive, prompt, output}, &ids);
  EXPECT_EQ(row.penalty_begin, 7);
  EXPECT_EQ(row.num_prompt_tokens, 0);
  EXPECT_EQ(row.num_output_tokens, 3);
  EXPECT_EQ(row.frequency_penalty, 0.5f);
  EXPECT_EQ(row.presence_penalty, 0.25f);
  EXPECT_EQ(ids.size(), 10u);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 7, ids.end()), std::vector<int32_t>({9, 9, 100000}));

  // Presence alone is enough to need the output.
  SamplingParams presence;
  presence.presence_penalty = -0.5f;
  row = PackDeviceSamplingRow({&presence, prompt, {}}, &ids);
  EXPECT_EQ(row.penalty_begin, 10);
  EXPECT_EQ(row.num_output_tokens, 0);
  EXPECT_EQ(row.output_index, 0);
  EXPECT_EQ(ids.size(), 10u);
}

}  // namespace
}  // namespace loom
