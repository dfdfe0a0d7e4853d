#include "server/api/openai_params.h"

#include "gtest/gtest.h"
#include "server/api/api_status.h"

namespace loom::api {
namespace {

ParseLimits Limits() {
  ParseLimits l;
  l.vocab_size = 1000;
  return l;
}

absl::StatusOr<CompletionParams> Completion(std::string_view body, bool strict = false) {
  return ParseCompletionRequest(body, EndpointKind::kCompletion, Limits(), strict);
}
absl::StatusOr<CompletionParams> Chat(std::string_view body, bool strict = false) {
  return ParseCompletionRequest(body, EndpointKind::kChat, Limits(), strict);
}

// The error is a 400 naming `param`, and its message contains `words`.
void ExpectError(const absl::StatusOr<CompletionParams>& r, std::string_view param,
                 std::string_view words) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(HttpStatusFor(r.status().code()), 400) << r.status();
  EXPECT_EQ(ParamOf(r.status()), param) << r.status();
  EXPECT_NE(std::string(r.status().message()).find(words), std::string::npos) << r.status();
}

template <typename T>
void ExpectTokenizeError(const absl::StatusOr<T>& r, std::string_view param) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(HttpStatusFor(r.status().code()), 400) << r.status();
  EXPECT_EQ(ParamOf(r.status()), param) << r.status();
}

TEST(OpenAiParamsTest, CompletionWithEverything) {
  auto r = Completion(R"({"model":"m","prompt":"hi","max_tokens":5,"temperature":0.5,
      "top_p":0.9,"top_k":40,"min_p":0.1,"n":2,"stream":true,"stream_options":{"include_usage":true},
      "logprobs":3,"echo":true,"stop":["a","b"],"stop_token_ids":[7],"presence_penalty":0.5,
      "frequency_penalty":-0.5,"repetition_penalty":1.1,"logit_bias":{"12":-100,"3":5.5},
      "seed":42,"ignore_eos":true,"min_tokens":2,"priority":-1,"user":"u","cache_salt":"s"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].text, "hi");
  EXPECT_EQ(r->max_tokens, 5);
  EXPECT_EQ(r->n, 2);
  EXPECT_TRUE(r->stream && r->include_usage && r->echo && r->ignore_eos);
  EXPECT_EQ(r->logprobs, 3);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->stop_token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(r->logit_bias.size(), 2u);
  EXPECT_EQ(*r->seed, 42);
  EXPECT_EQ(r->priority, -1);
  EXPECT_EQ(r->cache_salt, "s");
}

TEST(OpenAiParamsTest, PromptForms) {
  auto ids = Completion(R"({"prompt":[1,2,3]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(ids->prompts[0].is_ids);
  EXPECT_EQ(ids->prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  auto batch = Completion(R"({"prompt":["a",[4,5],"c"]})");
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->prompts.size(), 3u);
  ExpectError(Completion(R"({"prompt":[]})"), "prompt", "not empty");
  ExpectError(Completion(R"({"prompt":[1,5000]})"), "prompt", "outside the vocabulary");
  ExpectError(Completion(R"({"prompt":[[]]})"), "prompt", "non-empty");
  ExpectError(Completion(R"({"prompt":{"a":1}})"), "prompt", "must be a string");
  ExpectError(Completion(R"({})"), "prompt", "required");
}

TEST(OpenAiParamsTest, WrongTypesAndRangesNameTheField) {
  ExpectError(Completion(R"({"prompt":"x","temperature":"hot"})"), "temperature", "number");
  ExpectError(Completion(R"({"prompt":"x","temperature":3})"), "temperature", "[0, 2]");
  ExpectError(Completion(R"({"prompt":"x","top_p":0})"), "top_p", "(0, 1]");
  ExpectError(Completion(R"({"prompt":"x","n":0})"), "n", "[1, 128]");
  ExpectError(Completion(R"({"prompt":"x","n":1.5})"), "n", "integer");
  ExpectError(Completion(R"({"prompt":"x","max_tokens":-1})"), "max_tokens", "[0,");
  ExpectError(Completion(R"({"prompt":"x","max_tokens":0})"), "max_tokens", "at least 1");
  ExpectError(Completion(R"({"prompt":"x","stream":"yes"})"), "stream", "boolean");
  ExpectError(Completion(R"({"prompt":"x","logprobs":21})"), "logprobs", "[0, 20]");
  ExpectError(Completion(R"({"prompt":"x","stop":[1]})"), "stop", "strings");
  ExpectError(Completion(R"({"prompt":"x","stop":[""]})"), "stop", "1 to");
  ExpectError(Completion(R"({"prompt":"x","logit_bias":{"x":1}})"), "logit_bias", "token id");
  ExpectError(Completion(R"({"prompt":"x","logit_bias":{"1":101}})"), "logit_bias", "[-100, 100]");
  ExpectError(Completion(R"({"prompt":"x","stream_options":{"include_usage":true}})"),
              "stream_options", "needs 'stream'");
  ExpectError(Completion(R"({"prompt":"x","max_tokens":2,"min_tokens":3})"), "min_tokens",
              "must not exceed");
  ExpectError(Completion(R"({"prompt":"x","seed":1e30})"), "seed", "");
}

// Integers past int64 (2^63 and up, as JSON allows) are a 400 naming the field, never a crash.
TEST(OpenAiParamsTest, TokenIdsBeyondInt64AreRefused) {
  ExpectError(Completion(R"({"prompt":[9223372036854775808],"max_tokens":4})"), "prompt",
              "outside the vocabulary");
  ExpectError(Completion(R"({"prompt":[18446744073709551615]})"), "prompt", "outside the vocabulary");
  ExpectError(Completion(R"({"prompt":[[1],[2,9223372036854775808]]})"), "prompt",
              "outside the vocabulary");
  ExpectError(Completion(R"({"prompt":"x","stop_token_ids":[9223372036854775808]})"),
              "stop_token_ids", "outside the vocabulary");
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],
                      "stop_token_ids":[9223372036854775808]})"),
              "stop_token_ids", "outside the vocabulary");
  ExpectError(Completion(R"({"prompt":[9223372036854775807]})"), "prompt", "outside the vocabulary");
  ExpectError(Completion(R"({"prompt":[-9223372036854775808]})"), "prompt", "outside the vocabulary");
  ExpectError(Completion(R"({"prompt":[1e300]})"), "prompt", "");
}

// The rules shared with the gRPC API (param_validation.h) apply to JSON bodies.
TEST(OpenAiParamsTest, SharedRulesApply) {
  ExpectError(Completion(R"({"prompt":"x","logprobs":-1})"), "logprobs", "[0, 20]");
  ExpectError(Completion(R"({"prompt":"x","n":-1})"), "n", "[1, 128]");
  ExpectError(Completion(R"({"prompt":"x","n":99999999999})"), "n", "");
  ExpectError(Completion(R"({"prompt":"x","priority":1000001})"), "priority", "[-1000000, 1000000]");
  ExpectError(Completion(R"({"prompt":[1,-2]})"), "prompt", "outside the vocabulary");
  ExpectError(Completion(R"({"prompt":"x","logit_bias":{"-1":1}})"), "logit_bias", "token id");
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,
                      "top_logprobs":21})"),
              "top_logprobs", "[0, 20]");
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":-3})"),
              "max_completion_tokens", "[0,");
  ExpectError(Completion(R"({"prompt":"x","request_id":")" + std::string(300, 'r') + R"("})"),
              "request_id", "256");
  auto ok = Completion(R"({"prompt":"x","request_id":"abc-1","top_k":-1})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->request_id, "abc-1");
  EXPECT_FALSE(ok->max_tokens.has_value());
  EXPECT_FALSE(ok->logprobs.has_value());
}

TEST(OpenAiParamsTest, TokenizeBodies) {
  auto text = ParseTokenizeRequest(R"({"prompt":"hi","add_special_tokens":false})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_FALSE(text->is_chat);
  EXPECT_EQ(text->prompt, "hi");
  EXPECT_FALSE(text->add_special_tokens);
  auto chat = ParseTokenizeRequest(
      R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(chat->is_chat);
  EXPECT_EQ(chat->chat.kind, EndpointKind::kChat);
  EXPECT_FALSE(chat->chat.add_generation_prompt);
  ExpectTokenizeError(ParseTokenizeRequest(R"({"prompt":1})"), "prompt");
  ExpectTokenizeError(ParseTokenizeRequest(R"({"messages":"hi"})"), "messages");
  ExpectTokenizeError(ParseTokenizeRequest(R"({"messages":[{"content":"x"}]})"), "messages[0]");
  ExpectTokenizeError(ParseTokenizeRequest(R"({"prompt":"x","add_special_tokens":"no"})"),
                      "add_special_tokens");
  ExpectTokenizeError(ParseTokenizeRequest("[1]"), "");
}

TEST(OpenAiParamsTest, DetokenizeBodies) {
  auto ids = ParseDetokenizeRequest(R"({"tokens":[0,5,999]})", 1000);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 5, 999}));
  for (std::string_view bad : {R"({"tokens":[1000]})", R"({"tokens":[-1]})", R"({"tokens":[true]})",
                               R"({"tokens":[9223372036854775808]})", R"({"tokens":[1.5]})",
                               R"({"tokens":"1"})", R"({})", "{"}) {
    auto r = ParseDetokenizeRequest(bad, 1000);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(HttpStatusFor(r.status().code()), 400) << bad;
  }
}

TEST(OpenAiParamsTest, MalformedBodies) {
  ExpectError(Completion("{"), "", "not valid JSON");
  ExpectError(Completion("[1]"), "", "JSON object");
  ExpectError(Completion(""), "", "not valid JSON");
}

TEST(OpenAiParamsTest, UnsupportedFeaturesAreRefusedNotIgnored) {
  ExpectError(Completion(R"({"prompt":"x","suffix":"y"})"), "suffix", "not supported");
  ExpectError(Completion(R"({"prompt":"x","best_of":3})"), "best_of", "must equal");
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})"),
              "response_format", "not supported yet");
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})"),
              "tools", "not supported yet");
  EXPECT_TRUE(Chat(R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}})").ok());
}

// Frameworks without tools send an empty list, often with tool_choice "none".
TEST(OpenAiParamsTest, AnEmptyToolListAsksForNothingAndIsAccepted) {
  const auto empty = Chat(R"({"messages":[{"role":"user","content":"x"}],"tools":[]})");
  EXPECT_TRUE(empty.ok()) << empty.status();
  const auto none = Chat(R"({"messages":[{"role":"user","content":"x"}],"tools":[],"tool_choice":"none"})",
                         /*strict=*/true);
  EXPECT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(Chat(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"auto"})").ok());
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],"tools":{}})"), "tools",
              "must be an array");
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],"tools":[],"tool_choice":"required"})"),
              "tool_choice", "needs tools");
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function","function":{"name":"f"}}})"),
              "tool_choice", "needs tools");
}

TEST(OpenAiParamsTest, TimeoutAndRequestTemplate) {
  auto r = Chat(R"({"messages":[{"role":"user","content":"x"}],"timeout":2.5,"chat_template":"{{ 1 }}"})",
                /*strict=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->timeout_s, 2.5);
  EXPECT_EQ(r->chat_template, "{{ 1 }}");
  ExpectError(Completion(R"({"prompt":"x","timeout":-1})"), "timeout", "[0,");
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],"chat_template":5})"),
              "chat_template", "string");
}

TEST(OpenAiParamsTest, StrictModeRefusesUnknownFields) {
  EXPECT_TRUE(Completion(R"({"prompt":"x","frobnicate":1})").ok());
  ExpectError(Completion(R"({"prompt":"x","frobnicate":1})", /*strict=*/true), "frobnicate",
              "unknown field");
  EXPECT_TRUE(Completion(R"({"prompt":"x","top_k":5})", /*strict=*/true).ok());
}

TEST(OpenAiParamsTest, ChatMessagesAndLogprobs) {
  auto r = Chat(R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]},
      {"role":"assistant","content":null}],"logprobs":true,"top_logprobs":2,"max_completion_tokens":9,
      "chat_template_kwargs":{"enable_thinking":false}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->logprobs, 2);
  EXPECT_EQ(r->max_tokens, 9);
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_NE(r->messages_json.find("enable_thinking"), std::string::npos);
  EXPECT_EQ(r->chat_template_kwargs_json, R"({"enable_thinking":false})");
  ExpectError(Chat(R"({"messages":[]})"), "messages", "non-empty");
  ExpectError(Chat(R"({"messages":[{"content":"x"}]})"), "messages[0]", "role");
  ExpectError(Chat(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})"),
              "messages[0]", "only parts of type 'text'");
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":3})"),
              "top_logprobs", "needs 'logprobs'");
  auto cont = Chat(R"({"messages":[{"role":"user","content":"x"}],"continue_final_message":true})");
  ASSERT_TRUE(cont.ok());
  EXPECT_FALSE(cont->add_generation_prompt);
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"x"}],"continue_final_message":true,
      "add_generation_prompt":true})"), "continue_final_message", "exclude");
}

// max_tokens 0 asks for the prompt alone (its echo and scores), so it needs echo; chat reads
// echo too (the last assistant message is echoed).
TEST(OpenAiParamsTest, MaxTokensZeroNeedsEchoAndChatReadsEcho) {
  absl::StatusOr<CompletionParams> scored =
      Completion(R"({"prompt":"x","max_tokens":0,"echo":true,"logprobs":0})");
  ASSERT_TRUE(scored.ok()) << scored.status();
  EXPECT_EQ(scored->max_tokens, 0);
  EXPECT_TRUE(scored->echo);
  ExpectError(Completion(R"({"prompt":"x","max_tokens":0,"echo":false})"), "max_tokens",
              "at least 1");
  absl::StatusOr<CompletionParams> chat =
      Chat(R"({"messages":[{"role":"assistant","content":"a"}],"echo":true})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(chat->echo);
  ExpectError(Chat(R"({"messages":[{"role":"user","content":"a"}],"echo":1})"), "echo",
              "boolean");
}

}  // namespace
}  // namespace loom::api
