// server/cluster/wire.h: a request moving between instances survives the wire exactly, and
// what a peer sends is checked as a client's request would be.
#include "server/cluster/wire.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace loom::cluster {
namespace {

constexpr int32_t kVocab = 100;

MigrantState Sample() {
  MigrantState s;
  SchedRequest& r = s.params;
  r.prompt = {TokenId(1), TokenId(2), TokenId(3)};
  r.max_new_tokens = 8;
  r.stop_token_ids = {TokenId(9)};
  r.priority = 2;
  r.cache_salt = "salt";
  r.sampling.temperature = 0.8f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 1234;
  r.sampling.logit_bias = {{TokenId(5), 1.5f}};
  s.tokens = {TokenId(1), TokenId(2), TokenId(3), TokenId(4), TokenId(5)};
  s.num_computed = 4;
  return s;
}

TEST(ClusterWireTest, ARequestRoundTrips) {
  v1::ResumeRequest msg;
  MigrantToProto(Sample(), &msg);
  absl::StatusOr<MigrantState> back = MigrantFromProto(msg, kVocab, 1000);
  ASSERT_TRUE(back.ok()) << back.status();
  const MigrantState want = Sample();
  EXPECT_EQ(back->tokens, want.tokens);
  EXPECT_EQ(back->params.prompt, want.params.prompt);
  EXPECT_EQ(back->params.stop_token_ids, want.params.stop_token_ids);
  EXPECT_EQ(back->params.max_new_tokens, 8);
  EXPECT_EQ(back->params.priority, 2);
  EXPECT_EQ(back->params.cache_salt, "salt");
  EXPECT_EQ(back->params.sampling.seed, 1234u);
  EXPECT_FLOAT_EQ(back->params.sampling.top_p, 0.9f);
  EXPECT_EQ(back->num_computed, 4);
  EXPECT_EQ(back->params.deadline_ms, 0);
}

TEST(ClusterWireTest, ADeadlineTravelsAsTheTimeLeft) {
  v1::ResumeRequest msg;
  MigrantToProto(Sample(), &msg);
  msg.set_deadline_remaining_ms(250);
  absl::StatusOr<MigrantState> back = MigrantFromProto(msg, kVocab, 1000);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->params.deadline_ms, 1250);
}

TEST(ClusterWireTest, WhatAPeerGetsWrongIsRefused) {
  const auto refused = [](void (*spoil)(v1::ResumeRequest&)) {
    v1::ResumeRequest msg;
    MigrantToProto(Sample(), &msg);
    spoil(msg);
    absl::StatusOr<MigrantState> got = MigrantFromProto(msg, kVocab, 1000);
    return !got.ok() && got.status().code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.clear_prompt(); }));
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.set_prompt(0, kVocab); }));
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.set_prompt(0, -1); }));
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.add_generated(kVocab); }));
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.add_stop_token_ids(kVocab + 7); }));
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.set_max_new_tokens(1); }));  // 2 generated
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.set_max_new_tokens(-1); }));
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.set_deadline_remaining_ms(-1); }));
  // now + this would overflow.
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) {
    m.set_deadline_remaining_ms(std::numeric_limits<int64_t>::max());
  }));
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.mutable_sampling()->set_top_p(0); }));
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.mutable_sampling()->set_temperature(-1); }));
  EXPECT_TRUE(refused([](v1::ResumeRequest& m) { m.mutable_sampling()->add_logit_bias_ids(3); }));
  EXPECT_TRUE(refused(
      [](v1::ResumeRequest& m) { m.mutable_sampling()->add_min_tokens_banned_ids(kVocab); }));
}

TEST(ClusterWireTest, OutputsRoundTripAndAnUnknownFinishIsAnAbort) {
  ChoiceOutput out;
  out.request_id = RequestId(7);
  out.new_tokens = {TokenId(3), TokenId(4)};
  out.finish = FinishReason::kStop;
  out.num_cached_tokens = 16;
  v1::RemoteOutput msg;
  OutputToProto(out, &msg);
  ChoiceOutput back = OutputFromProto(msg, RequestId(42));
  EXPECT_EQ(back.request_id, RequestId(42));
  EXPECT_EQ(back.index, 0);
  EXPECT_EQ(back.new_tokens, out.new_tokens);
  EXPECT_EQ(back.finish, FinishReason::kStop);
  EXPECT_EQ(back.num_cached_tokens, 16);
  for (int32_t f : {-1, 99}) {
    msg.set_finish(f);
    EXPECT_EQ(OutputFromProto(msg, RequestId(1)).finish, FinishReason::kAbort);
  }
}

}  // namespace
}  // namespace loom::cluster
