// libFuzzer target for the OpenAI request parsers: the first byte picks the endpoint
// (completions, chat, /tokenize or /detokenize) and strict mode, the rest is the request body.
// Parsing must answer a 4xx Status or parameters within the documented limits; never crash (a
// JSON integer past int64 once did).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/api/api_status.h"
#include "server/api/openai_params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using loom::api::EndpointKind;
  const EndpointKind kind = (data[0] & 1) ? EndpointKind::kChat : EndpointKind::kCompletion;
  const bool strict = (data[0] & 2) != 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  loom::api::ParseLimits limits;
  limits.vocab_size = 1000;
  const auto expect_4xx = [](const absl::Status& status) {
    const int http = loom::api::HttpStatusFor(status.code());
    if (http < 400 || http >= 500) std::abort();
  };
  if (data[0] & 4) {
    auto tokenize = loom::api::ParseTokenizeRequest(body);
    if (!tokenize.ok()) expect_4xx(tokenize.status());
    auto ids = loom::api::ParseDetokenizeRequest(body, limits.vocab_size);
    if (!ids.ok()) {
      expect_4xx(ids.status());
      return 0;
    }
    for (int32_t id : *ids) {
      if (id < 0 || id >= limits.vocab_size) std::abort();
    }
    return 0;
  }
  auto params = loom::api::ParseCompletionRequest(body, kind, limits, strict);
  if (!params.ok()) {
    expect_4xx(params.status());
    return 0;
  }
  const auto in_vocab = [&](int32_t id) { return id >= 0 && id < limits.vocab_size; };
  for (const auto& prompt : params->prompts) {
    for (int32_t id : prompt.ids) {
      if (!in_vocab(id)) std::abort();
    }
  }
  for (int32_t id : params->stop_token_ids) {
    if (!in_vocab(id)) std::abort();
  }
  for (const auto& [id, bias] : params->logit_bias) {
    if (!in_vocab(id) || !(bias >= -100 && bias <= 100)) std::abort();
  }
  if (params->n < 1 || params->n > limits.max_n) std::abort();
  if (static_cast<int64_t>(params->stop.size()) > limits.max_stop_strings) std::abort();
  if (static_cast<int64_t>(params->prompts.size()) > limits.max_prompts) std::abort();
  return 0;
}
