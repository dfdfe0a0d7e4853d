// POST /v1/completions and /v1/chat/completions: validation, prompt building (the tokenizer for
// text, the model's chat template for messages), context checks, then a CompletionJob.
#pragma once

#include <memory>

#include "server/api/openai_params.h"
#include "server/http/http_types.h"
#include "server/serving/generation.h"
#include "server/serving/serving_context.h"
#include "server/serving/work_queue.h"

namespace loom::api {

void HandleCompletion(ServingContext& context, WorkQueue& work, EndpointKind kind,
                      const http::Request& request, std::shared_ptr<http::Responder> responder);

// The engine request for one prompt of `params` (already checked by ValidateParams): defaults
// filled in, the context length and the sampling parameters checked. Shared with the gRPC API.
absl::StatusOr<GenerationRequest> BuildGenerationRequest(const ServingContext& context,
                                                         const CompletionParams& params,
                                                         size_t prompt_len);

// Token ids of a chat conversation (the body's `messages` and options) through the model's
// template; shared with /tokenize.
absl::StatusOr<std::vector<int32_t>> RenderChatPrompt(const ServingContext& context,
                                                      const CompletionParams& params);

}  // namespace loom::api
