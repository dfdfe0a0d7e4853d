#include "server/api/param_validation.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "server/api/api_status.h"

namespace loom::api {
namespace {

ParseLimits Limits() {
  ParseLimits l;
  l.vocab_size = 1000;
  return l;
}

CompletionParams Valid() {
  CompletionParams p;
  p.prompts.push_back(PromptInput{{}, {1, 2, 3}, true});
  return p;
}

ParamNames GrpcNames() {
  ParamNames names;
  names.prompt = "token_ids";
  names.sampling_prefix = "sampling.";
  return names;
}

// The error is a 400 naming `param`, and its message contains `words`.
void ExpectError(const absl::Status& s, std::string_view param, std::string_view words) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(HttpStatusFor(s.code()), 400) << s;
  EXPECT_EQ(ParamOf(s), param) << s;
  EXPECT_NE(std::string(s.message()).find(words), std::string::npos) << s;
}

template <typename Edit>
absl::Status With(Edit edit, const ParamNames& names = {}) {
  CompletionParams p = Valid();
  edit(p);
  return ValidateParams(p, Limits(), names);
}

TEST(ParamValidationTest, DefaultsAndBoundsAreAccepted) {
  EXPECT_TRUE(ValidateParams(Valid(), Limits(), {}).ok());
  EXPECT_TRUE(With([](CompletionParams& p) {
                p.max_tokens = 5;
                p.min_tokens = 5;
                p.n = 128;
                p.logprobs = 20;
                p.temperature = 2;
                p.top_p = 1;
                p.top_k = -1;
                p.priority = -1000000;
                p.logit_bias = {{999, -100.0f}};
                p.stop_token_ids = {0, 999};
                p.request_id = std::string(kMaxRequestIdBytes, 'x');
              }).ok());
  // Zero new tokens is fine when the prompt is echoed.
  EXPECT_TRUE(With([](CompletionParams& p) {
                p.max_tokens = 0;
                p.echo = true;
              }).ok());
}

TEST(ParamValidationTest, LengthsNameTheField) {
  ExpectError(With([](CompletionParams& p) { p.max_tokens = -5; }), "max_tokens", "[0,");
  ExpectError(With([](CompletionParams& p) { p.max_tokens = 0; }), "max_tokens", "at least 1");
  ExpectError(With([](CompletionParams& p) { p.min_tokens = -1; }), "min_tokens", "[0,");
  ExpectError(With([](CompletionParams& p) {
                p.max_tokens = 4;
                p.min_tokens = 5;
              }),
              "min_tokens", "must not exceed 'max_tokens'");
  ParamNames chat;
  chat.max_tokens = "max_completion_tokens";
  ExpectError(With([](CompletionParams& p) { p.max_tokens = -1; }, chat), "max_completion_tokens",
              "'max_completion_tokens' must be in [0,");
  // Without max_tokens, min_tokens alone is no contradiction.
  EXPECT_TRUE(With([](CompletionParams& p) { p.min_tokens = 100; }).ok());
}

TEST(ParamValidationTest, ChoicesLogprobsAndPriority) {
  ExpectError(With([](CompletionParams& p) { p.n = -1; }), "n", "[1, 128]");
  ExpectError(With([](CompletionParams& p) { p.n = 0; }), "n", "[1, 128]");
  ExpectError(With([](CompletionParams& p) { p.n = 129; }), "n", "[1, 128]");
  ExpectError(With([](CompletionParams& p) { p.logprobs = -1; }), "logprobs", "[0, 20]");
  ExpectError(With([](CompletionParams& p) { p.logprobs = 21; }), "logprobs", "[0, 20]");
  ParamNames chat;
  chat.logprobs = "top_logprobs";
  ExpectError(With([](CompletionParams& p) { p.logprobs = 21; }, chat), "top_logprobs", "[0, 20]");
  ExpectError(With([](CompletionParams& p) { p.priority = 1000001; }), "priority",
              "[-1000000, 1000000]");
  ExpectError(With([](CompletionParams& p) { p.priority = std::numeric_limits<int32_t>::min(); }),
              "priority", "[-1000000, 1000000]");
  ExpectError(With([](CompletionParams& p) { p.timeout_s = -1; }), "timeout", "[0,");
}

TEST(ParamValidationTest, SamplingFieldsCarryTheApisPrefix) {
  ExpectError(With([](CompletionParams& p) { p.temperature = 3; }), "temperature",
              "'temperature' must be in [0, 2]");
  ExpectError(With([](CompletionParams& p) { p.temperature = 3; }, GrpcNames()),
              "sampling.temperature", "'sampling.temperature' must be in [0, 2]");
  ExpectError(With([](CompletionParams& p) { p.temperature = std::nan(""); }, GrpcNames()),
              "sampling.temperature", "[0, 2]");
  ExpectError(With([](CompletionParams& p) { p.top_p = 0; }, GrpcNames()), "sampling.top_p",
              "(0, 1]");
  ExpectError(With([](CompletionParams& p) { p.top_k = -2; }), "top_k", "[-1,");
  ExpectError(With([](CompletionParams& p) { p.min_p = 1.5; }), "min_p", "[0, 1]");
  ExpectError(With([](CompletionParams& p) { p.repetition_penalty = 0; }), "repetition_penalty",
              "[0.001, 100]");
  ExpectError(With([](CompletionParams& p) { p.frequency_penalty = -3; }), "frequency_penalty",
              "[-2, 2]");
  ExpectError(With([](CompletionParams& p) { p.presence_penalty = INFINITY; }), "presence_penalty",
              "[-2, 2]");
}

TEST(ParamValidationTest, TokenIdsStopsAndLogitBias) {
  ExpectError(With([](CompletionParams& p) { p.prompts[0].ids = {1, 1000}; }), "prompt",
              "token id 1000 is outside the vocabulary [0, 1000)");
  ExpectError(With([](CompletionParams& p) { p.prompts[0].ids = {-1}; }, GrpcNames()),
              "token_ids", "outside the vocabulary");
  ExpectError(With([](CompletionParams& p) { p.stop_token_ids = {1000}; }), "stop_token_ids",
              "outside the vocabulary");
  ExpectError(With([](CompletionParams& p) { p.stop = {""}; }), "stop", "1 to 1024 bytes");
  ExpectError(With([](CompletionParams& p) { p.stop = {std::string(1025, 'x')}; }), "stop",
              "1 to 1024 bytes");
  ExpectError(With([](CompletionParams& p) { p.stop.assign(17, "x"); }), "stop",
              "at most 16 stop strings");
  ExpectError(With([](CompletionParams& p) { p.logit_bias = {{1000, 1.0f}}; }, GrpcNames()),
              "sampling.logit_bias", "not a token id");
  ExpectError(With([](CompletionParams& p) { p.logit_bias = {{1, 101.0f}}; }), "logit_bias",
              "[-100, 100]");
  ExpectError(With([](CompletionParams& p) { p.logit_bias = {{1, std::nanf("")}}; }), "logit_bias",
              "[-100, 100]");
  ExpectError(With([](CompletionParams& p) { p.logit_bias.assign(1025, {1, 0.0f}); }),
              "logit_bias", "at most 1024");
}

TEST(ParamValidationTest, RequestIdIsShortAndVisibleAscii) {
  EXPECT_TRUE(IsValidRequestId("req-1_A.b:c/d"));
  EXPECT_TRUE(IsValidRequestId(std::string(kMaxRequestIdBytes, 'a')));
  EXPECT_FALSE(IsValidRequestId(""));
  EXPECT_FALSE(IsValidRequestId(std::string(kMaxRequestIdBytes + 1, 'a')));
  EXPECT_FALSE(IsValidRequestId("two words"));
  EXPECT_FALSE(IsValidRequestId("line\nbreak"));
  EXPECT_FALSE(IsValidRequestId("caf\xc3\xa9"));
  ExpectError(With([](CompletionParams& p) { p.request_id = std::string(4 << 20, 'x'); }),
              "request_id", "1 to 256 visible ASCII characters");
  EXPECT_TRUE(With([](CompletionParams& p) { p.request_id = ""; }).ok());  // none given
}

}  // namespace
}  // namespace loom::api

namespace loom::api {
namespace {

TEST(ParamValidationTest, TokenizedPromptMustFitTheVocabulary) {
  const std::vector<int32_t> fits = {0, 5, 9};
  EXPECT_TRUE(CheckTokenizedPrompt(fits, 10, "prompt").ok());
  const std::vector<int32_t> past = {1, 10};
  const absl::Status status = CheckTokenizedPrompt(past, 10, "messages");
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_EQ(ParamOf(status), "messages");
  EXPECT_NE(status.message().find("token id 10"), std::string_view::npos) << status;
}

}  // namespace
}  // namespace loom::api
