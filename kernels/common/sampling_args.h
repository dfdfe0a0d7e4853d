// Per-row arguments of the device sampler (kernels/cuda/sampling.h), as plain data.
//
// Kept apart from the CUDA header so that plain C++ built without CUDA (the engine's packing of
// SamplingParams into rows, engine/sampling/device_sampling_params.h) can fill them. The meaning
// of every field is that of the same-named SamplingParams field (engine/api/sampling_params.h);
// the host copies an array of these to the device, one per logits row.
#pragma once

#include <cstdint>
#include <type_traits>

namespace loom {

struct DeviceSamplingRow {
  // 0 selects greedy decoding (argmax, ties to the lowest id); otherwise > 0.
  float temperature = 0.0f;
  // Filters, applied as the CPU sampler applies them: top_k 0 (or >= vocab) keeps all, top_p 1
  // and min_p 0 disable theirs.
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t top_k = 0;
  // Penalties; 1, 0 and 0 disable them.
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // This row's token ids in the sampler's penalty id array, which concatenates every row's
  // list: num_prompt_tokens prompt ids, then num_output_tokens output ids, starting at index
  // penalty_begin. Ids outside [0, vocab) are ignored. num_output_tokens < 2^29.
  int32_t num_prompt_tokens = 0;
  // Keys the draw: the uniform is the CPU sampler's CounterUniform(seed, output_index), where
  // output_index is the number of tokens generated so far.
  uint64_t seed = 0;
  int64_t output_index = 0;
  int64_t penalty_begin = 0;
  int32_t num_output_tokens = 0;
  int32_t reserved = 0;
};

static_assert(std::is_trivially_copyable_v<DeviceSamplingRow>);
static_assert(sizeof(DeviceSamplingRow) == 64);

}  // namespace loom
