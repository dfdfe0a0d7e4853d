#include "server/grpc/completion_params.h"

#include "engine/common/status.h"
#include "server/api/api_status.h"
#include "server/api/param_validation.h"

namespace loom {

absl::StatusOr<api::CompletionParams> ToCompletionParams(const loom::v1::GenerateRequest& in,
                                                         const api::ParseLimits& limits) {
  api::CompletionParams p;
  p.kind = api::EndpointKind::kCompletion;
  p.request_id = in.request_id();
  if (in.has_token_ids()) {
    p.prompts.push_back(api::PromptInput{
        {}, std::vector<int32_t>(in.token_ids().ids().begin(), in.token_ids().ids().end()), true});
  } else if (in.has_text()) {
    p.prompts.push_back(api::PromptInput{in.text(), {}, false});
  } else {
    return api::ParamError("text", "the prompt is empty: set 'text' or 'token_ids'");
  }
  if (in.max_tokens() != 0) p.max_tokens = in.max_tokens();
  p.min_tokens = in.min_tokens();
  p.n = in.n() != 0 ? in.n() : 1;
  if (in.has_logprobs()) p.logprobs = in.logprobs();
  const loom::v1::SamplingParams& s = in.sampling();
  if (s.has_temperature()) p.temperature = s.temperature();
  if (s.has_top_p()) p.top_p = s.top_p();
  p.top_k = s.top_k();
  p.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  p.frequency_penalty = s.frequency_penalty();
  p.presence_penalty = s.presence_penalty();
  if (s.has_seed()) p.seed = static_cast<int64_t>(s.seed());  // the engine takes it as uint64
  for (const auto& [id, bias] : s.logit_bias()) p.logit_bias.emplace_back(id, bias);
  p.stop.assign(in.stop().begin(), in.stop().end());
  p.stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  p.ignore_eos = in.ignore_eos();
  p.skip_special_tokens = in.skip_special_tokens();
  p.priority = in.priority();
  p.cache_salt = in.cache_salt();
  api::ParamNames names;
  names.prompt = "token_ids";
  names.sampling_prefix = "sampling.";
  LOOM_RETURN_IF_ERROR(api::ValidateParams(p, limits, names));
  return p;
}

}  // namespace loom
