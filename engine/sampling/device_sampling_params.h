// Which sequences the CUDA sampler (kernels/cuda/sampling.h) can sample, and their rows for it.
//
// The device sampler returns exactly the token `Sample` (sampler.h) returns, for every request
// that uses only temperature, top_k, top_p, min_p, the three penalties and the seeded draw. A
// request that asks for log-probabilities or a logit bias, or one whose min_tokens ban is
// active, is sampled on the host. Plain C++ (no CUDA headers): the engine fills the rows and the
// penalty id array on the host and copies both to the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/api/sampling_params.h"
#include "engine/sampling/sampler.h"
#include "kernels/common/sampling_args.h"

namespace loom {

// True when the device sampler gives Sample's token for this request at every output index:
// no log-probabilities (logprobs < 0), no logit_bias, and no min_tokens ban (min_tokens <= 0 or
// no banned ids). prompt_logprobs concern prompt positions, not the sampled token, and are not
// looked at.
bool DeviceSamplingSupports(const SamplingParams& params);

// The same for the token at output index `num_output_tokens` only: a min_tokens ban no longer
// matters once num_output_tokens >= min_tokens.
bool DeviceSamplingSupports(const SamplingParams& params, size_t num_output_tokens);

// The row of one sequence about to sample its next token (input.params must be non-null).
// Appends the token ids its penalties need to `penalty_ids` (the prompt's when
// repetition_penalty != 1, then the output's when any penalty is active; nothing otherwise) and
// records where they start; output_index is input.output_token_ids.size(). Ids are copied as
// they are: the device sampler ignores ids outside [0, vocab), as the CPU sampler does.
DeviceSamplingRow PackDeviceSamplingRow(const SamplerInput& input,
                                        std::vector<int32_t>* penalty_ids);

}  // namespace loom
