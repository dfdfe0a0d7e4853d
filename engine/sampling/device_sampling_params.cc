// DeviceSamplingSupports and PackDeviceSamplingRow; the contract is in the header.
#include "engine/sampling/device_sampling_params.h"

#include <algorithm>

#include "engine/common/logging.h"

namespace loom {
namespace {

bool SupportsAllButBan(const SamplingParams& params) {
  return params.logprobs < 0 && params.logit_bias.empty();
}

bool HasBan(const SamplingParams& params) {
  return params.min_tokens > 0 && !params.min_tokens_banned_ids.empty();
}

void AppendIds(std::span<const TokenId> ids, std::vector<int32_t>* out) {
  for (TokenId id : ids) out->push_back(id.value());
}

}  // namespace

bool DeviceSamplingSupports(const SamplingParams& params) {
  return SupportsAllButBan(params) && !HasBan(params);
}

bool DeviceSamplingSupports(const SamplingParams& params, size_t num_output_tokens) {
  // As sampler.cc MinTokensBanActive: the ban applies while fewer than min_tokens are out.
  const bool ban_active =
      HasBan(params) && num_output_tokens < static_cast<size_t>(params.min_tokens);
  return SupportsAllButBan(params) && !ban_active;
}

DeviceSamplingRow PackDeviceSamplingRow(const SamplerInput& input,
                                        std::vector<int32_t>* penalty_ids) {
  LOOM_CHECK(input.params != nullptr, "PackDeviceSamplingRow needs sampling params");
  const SamplingParams& params = *input.params;
  DeviceSamplingRow row;
  row.temperature = params.temperature;
  row.top_p = params.top_p;
  row.min_p = params.min_p;
  row.top_k = params.top_k;
  row.repetition_penalty = params.repetition_penalty;
  row.frequency_penalty = params.frequency_penalty;
  row.presence_penalty = params.presence_penalty;
  row.seed = params.seed;
  row.output_index = static_cast<int64_t>(input.output_token_ids.size());
  row.penalty_begin = static_cast<int64_t>(penalty_ids->size());
  const bool repetition = params.repetition_penalty != 1.0f;
  const bool additive = params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  if (repetition) {
    AppendIds(input.prompt_token_ids, penalty_ids);
    row.num_prompt_tokens = static_cast<int32_t>(input.prompt_token_ids.size());
  }
  if (repetition || additive) {
    LOOM_CHECK(input.output_token_ids.size() < (size_t{1} << 29),
               "device sampling: too many output tokens for the penalty counts");
    AppendIds(input.output_token_ids, penalty_ids);
    row.num_output_tokens = static_cast<int32_t>(input.output_token_ids.size());
  }
  return row;
}

}  // namespace loom
