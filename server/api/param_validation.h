// The range and consistency rules of a generation request, the one place both APIs check them.
//
// Each API first turns its wire form into CompletionParams — the OpenAI JSON body
// (openai_params.h) or a loom.v1.GenerateRequest (server/grpc/generate_params.h) — checking only
// what the wire form itself needs (types, integers that fit their field, default values). Then
// ValidateParams applies every rule on values: ranges, token ids inside the vocabulary, counts and
// sizes of stop strings and logit_bias, min_tokens <= max_tokens, the request_id's size and
// characters. An error is a ParamError naming the field as the client's API calls it
// (ParamNames), so `'sampling.temperature' must be in [0, 2]` on gRPC reads
// `'temperature' must be in [0, 2]` over HTTP.
//
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "server/api/openai_params.h"

namespace loom::api {

// The longest request_id a client may choose. It is repeated in every streamed gRPC message, so
// its size multiplies with the output's.
inline constexpr int32_t kMaxRequestIdBytes = 256;

// Field names as the client's API spells them, for error messages and the `param` of an error.
struct ParamNames {
  std::string_view prompt = "prompt";          // token ids of a prompt
  std::string_view max_tokens = "max_tokens";  // chat: max_completion_tokens when that was sent
  std::string_view logprobs = "logprobs";      // chat: top_logprobs
  // Put before the sampling fields' names (temperature, top_p, ..., logit_bias): "sampling." for
  // gRPC, where they live in a SamplingParams message.
  std::string_view sampling_prefix;
};

// Checks every rule above; the first broken one is the error.
absl::Status ValidateParams(const CompletionParams& params, const ParseLimits& limits,
                            const ParamNames& names);

// A prompt the tokenizer made (from text or a chat template) holds only ids the model has: a
// tokenizer that knows tokens the model lacks (e.g. an added token past a GGUF vocabulary) gives
// a ParamError on `field` naming the token id, not an out-of-range embedding lookup.
absl::Status CheckTokenizedPrompt(std::span<const int32_t> ids, int32_t vocab_size,
                                  std::string_view field);

// Whether `id` is an acceptable client request id: 1 to kMaxRequestIdBytes visible ASCII
// characters (0x21-0x7e: no spaces, no control characters).
bool IsValidRequestId(std::string_view id);

}  // namespace loom::api
