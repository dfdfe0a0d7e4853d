// A loom.v1.GenerateRequest converted into the parameters both APIs share
// (api::CompletionParams) and checked by the same rules as the HTTP API (api::ValidateParams,
// with gRPC's field names: `sampling.temperature`, `token_ids`). Apart from generate_params.h so
// that it builds without the serving core (the fuzzers).
//
// proto3 has no "absent" for plain scalars, so the documented zeros mean "the default":
// max_tokens 0 = 16, n 0 = 1, top_k/min_p/penalties 0 = off. Every other value is the client's,
// and a negative max_tokens, n or logprobs is an error, as it is over HTTP.
//
// Pure function; any thread.
#pragma once

#include "absl/status/statusor.h"
#include "loom/v1/generation.pb.h"
#include "server/api/openai_params.h"

namespace loom {

// The shared parameters of `request`, validated against `limits` (vocab_size must be set).
absl::StatusOr<api::CompletionParams> ToCompletionParams(const loom::v1::GenerateRequest& request,
                                                         const api::ParseLimits& limits);

}  // namespace loom
