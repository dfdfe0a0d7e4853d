#include "server/grpc/generate_params.h"

#include <utility>

#include "engine/common/status.h"
#include "server/api/api_status.h"
#include "server/api/param_validation.h"
#include "server/api/completions.h"

namespace loom {

absl::StatusOr<GenerationRequest> ToGenerationRequest(const ServingContext& ctx,
                                                      const loom::v1::GenerateRequest& request) {
  api::ParseLimits limits;
  limits.vocab_size = ctx.model.vocab_size;
  LOOM_ASSIGN_OR_RETURN(api::CompletionParams params, ToCompletionParams(request, limits));
  api::PromptInput& prompt = params.prompts.front();
  std::vector<int32_t> ids = std::move(prompt.ids);
  if (!prompt.is_ids) {
    if (ctx.tokenizer == nullptr) {
      return api::ParamError("text", "this model has no tokenizer; send token_ids");
    }
    ids = ctx.tokenizer->Encode(prompt.text, /*add_special_tokens=*/true);
    LOOM_RETURN_IF_ERROR(api::CheckTokenizedPrompt(ids, ctx.model.vocab_size, "text"));
  }
  if (ids.empty()) return api::ParamError(prompt.is_ids ? "token_ids" : "text", "the prompt is empty");
  LOOM_ASSIGN_OR_RETURN(GenerationRequest r, api::BuildGenerationRequest(ctx, params, ids.size()));
  r.prompt_ids = std::move(ids);
  return r;
}

}  // namespace loom
