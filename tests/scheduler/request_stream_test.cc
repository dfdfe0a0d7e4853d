#include "scheduler/request_stream.h"

#include "gtest/gtest.h"

namespace loom {
namespace {

PositionLogprobs Score(int32_t token, float logprob) {
  PositionLogprobs p;
  p.token = {TokenId(token), logprob};
  return p;
}

// Outputs of one choice pushed before a Drain are merged: nothing they carry is lost, the
// prompt's scores included, and the latest finish wins.
TEST(RequestStreamTest, PushesOfOneChoiceMergeEverything) {
  RequestStream stream(RequestId(1), 2);
  ChoiceOutput a;
  a.index = 0;
  a.prompt_logprobs = {Score(5, -1.0f), Score(6, -2.0f)};
  stream.Push(a);
  ChoiceOutput b;
  b.index = 0;
  b.prompt_logprobs = {Score(7, -3.0f)};
  b.new_tokens = {TokenId(9)};
  b.logprobs = {Score(9, -0.5f)};
  b.finish = FinishReason::kLength;
  stream.Push(b);
  ChoiceOutput other;
  other.index = 1;
  other.new_tokens = {TokenId(4)};
  stream.Push(other);
  StreamBatch batch = stream.Drain();
  ASSERT_EQ(batch.outputs.size(), 2u);
  const ChoiceOutput& merged = batch.outputs[0];
  ASSERT_EQ(merged.prompt_logprobs.size(), 3u);
  EXPECT_EQ(merged.prompt_logprobs[0].token.token_id, TokenId(5));
  EXPECT_EQ(merged.prompt_logprobs[2].token.token_id, TokenId(7));
  EXPECT_EQ(merged.new_tokens, std::vector<TokenId>{TokenId(9)});
  EXPECT_EQ(merged.logprobs.size(), 1u);
  EXPECT_EQ(merged.finish, FinishReason::kLength);
  EXPECT_EQ(batch.outputs[1].index, 1);
  EXPECT_FALSE(batch.done);  // choice 1 has not finished
}

}  // namespace
}  // namespace loom
