#include "server/grpc/generate_params.h"

#include <string>

#include "gtest/gtest.h"
#include "server/api/api_status.h"

namespace loom {
namespace {

api::ParseLimits Limits() {
  api::ParseLimits l;
  l.vocab_size = 512;
  return l;
}

loom::v1::GenerateRequest Request() {
  loom::v1::GenerateRequest r;
  r.mutable_token_ids()->add_ids(1);
  r.mutable_token_ids()->add_ids(2);
  return r;
}

// INVALID_ARGUMENT naming `param`, with `words` in the message.
void ExpectError(const loom::v1::GenerateRequest& r, std::string_view param,
                 std::string_view words) {
  absl::StatusOr<api::CompletionParams> p = ToCompletionParams(r, Limits());
  ASSERT_FALSE(p.ok()) << r.DebugString();
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
  EXPECT_EQ(api::ParamOf(p.status()), param) << p.status();
  EXPECT_NE(std::string(p.status().message()).find(words), std::string::npos) << p.status();
}

TEST(GenerateParamsTest, ProtoZerosAreTheDefaults) {
  absl::StatusOr<api::CompletionParams> p = ToCompletionParams(Request(), Limits());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->max_tokens.has_value());  // 16, as for /v1/completions
  EXPECT_EQ(p->n, 1);
  EXPECT_FALSE(p->logprobs.has_value());
  EXPECT_FLOAT_EQ(p->temperature, 1.0);
  EXPECT_FLOAT_EQ(p->top_p, 1.0);
  EXPECT_FLOAT_EQ(p->repetition_penalty, 1.0);
  EXPECT_FALSE(p->seed.has_value());
  EXPECT_EQ(p->prompts.size(), 1u);
  EXPECT_TRUE(p->prompts[0].is_ids);
  EXPECT_FALSE(p->skip_special_tokens);  // proto3's false, as the API always had it
}

TEST(GenerateParamsTest, FieldsCarryOver) {
  loom::v1::GenerateRequest r;
  r.set_text("hello");
  r.set_request_id("mine-1");
  r.set_max_tokens(7);
  r.set_min_tokens(2);
  r.set_n(3);
  r.set_logprobs(0);
  r.add_stop("x");
  r.add_stop_token_ids(9);
  r.set_priority(-5);
  r.set_cache_salt("salt");
  loom::v1::SamplingParams* s = r.mutable_sampling();
  s->set_temperature(0);
  s->set_top_k(-1);
  s->set_seed(~uint64_t{0});
  (*s->mutable_logit_bias())[4] = -3.5f;
  absl::StatusOr<api::CompletionParams> p = ToCompletionParams(r, Limits());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prompts[0].text, "hello");
  EXPECT_EQ(p->request_id, "mine-1");
  EXPECT_EQ(p->max_tokens, 7);
  EXPECT_EQ(p->min_tokens, 2);
  EXPECT_EQ(p->n, 3);
  EXPECT_EQ(p->logprobs, 0);
  EXPECT_EQ(p->stop, std::vector<std::string>{"x"});
  EXPECT_EQ(p->stop_token_ids, std::vector<int32_t>{9});
  EXPECT_EQ(p->priority, -5);
  EXPECT_EQ(p->cache_salt, "salt");
  EXPECT_EQ(p->temperature, 0);
  EXPECT_EQ(p->top_k, -1);
  EXPECT_EQ(static_cast<uint64_t>(*p->seed), ~uint64_t{0});
  ASSERT_EQ(p->logit_bias.size(), 1u);
  EXPECT_EQ(p->logit_bias[0].first, 4);
}

// What HTTP refuses, gRPC refuses too, naming the gRPC field.
TEST(GenerateParamsTest, TheHttpApisRulesApply) {
  loom::v1::GenerateRequest r = Request();
  r.set_max_tokens(-5);
  ExpectError(r, "max_tokens", "'max_tokens' must be in [0,");
  r = Request();
  r.set_n(-1);
  ExpectError(r, "n", "'n' must be in [1, 128]");
  r = Request();
  r.set_logprobs(-1);
  ExpectError(r, "logprobs", "'logprobs' must be in [0, 20]");
  r = Request();
  r.set_max_tokens(4);
  r.set_min_tokens(9);
  ExpectError(r, "min_tokens", "must not exceed");
  r = Request();
  r.set_priority(2000000000);
  ExpectError(r, "priority", "[-1000000, 1000000]");
  r = Request();
  r.mutable_sampling()->set_temperature(-1);
  ExpectError(r, "sampling.temperature", "'sampling.temperature' must be in [0, 2]");
  r = Request();
  r.mutable_sampling()->set_top_p(0);
  ExpectError(r, "sampling.top_p", "(0, 1]");
  r = Request();
  (*r.mutable_sampling()->mutable_logit_bias())[5000] = 1;
  ExpectError(r, "sampling.logit_bias", "not a token id");
  r = Request();
  r.mutable_token_ids()->add_ids(512);
  ExpectError(r, "token_ids", "outside the vocabulary");
  r = Request();
  r.add_stop_token_ids(-3);
  ExpectError(r, "stop_token_ids", "outside the vocabulary");
  r = Request();
  r.add_stop("");
  ExpectError(r, "stop", "1 to 1024 bytes");
}

TEST(GenerateParamsTest, RequestIdIsBounded) {
  loom::v1::GenerateRequest r = Request();
  r.set_request_id(std::string(4 << 20, 'x'));
  ExpectError(r, "request_id", "256");
  r.set_request_id("has space");
  ExpectError(r, "request_id", "visible ASCII");
  r.set_request_id(std::string(256, 'x'));
  EXPECT_TRUE(ToCompletionParams(r, Limits()).ok());
}

TEST(GenerateParamsTest, APromptIsRequired) {
  loom::v1::GenerateRequest r;
  ExpectError(r, "text", "set 'text' or 'token_ids'");
}

}  // namespace
}  // namespace loom
