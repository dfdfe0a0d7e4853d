// A loom.v1.GenerateRequest on its way to the engine: converted and validated
// (completion_params.h), then tokenized and turned into the engine request by the HTTP API's own
// code (api::BuildGenerationRequest).
//
// Pure functions; any thread.
#pragma once

#include "absl/status/statusor.h"
#include "loom/v1/generation.pb.h"
#include "server/api/openai_params.h"
#include "server/grpc/completion_params.h"
#include "server/serving/generation.h"
#include "server/serving/serving_context.h"

namespace loom {

// The engine request for `request`: validated, its text prompt tokenized (special tokens added),
// the context length checked. Errors are ParamErrors naming the gRPC field.
absl::StatusOr<GenerationRequest> ToGenerationRequest(const ServingContext& context,
                                                      const loom::v1::GenerateRequest& request);

}  // namespace loom
