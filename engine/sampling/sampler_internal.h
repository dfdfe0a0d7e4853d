// The sampler's building blocks, one per step of Sample (engine/sampling/sampler.h). Declared
// here for the sampler's own files and its tests (which check the partial-selection draw against
// a full-sort reference built from the same pieces); nothing else should call them.
//
// Hot loops run over the whole vocabulary (up to ~150K entries) once per sampled token, so they
// are written with explicit vectors (simd.h, 4 or 8 lanes chosen at run time), and each result
// is a deterministic function of its inputs: fixed reduction order, the same bits at either
// width.
#pragma once

#include <bit>
#include <cstdint>
#include <span>

#include "engine/api/sampling_params.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/simd.h"

namespace loom::sampling_internal {

// Largest logit (+inf included), NaN counting as -inf; -inf when no logit is larger.
float MaxLogit(std::span<const float> logits);

// Sum over i of exp(logits[i] - max), NaN counting as -inf and +inf as the largest finite float,
// where `max` is at least every logit so counted; in f32 blocks accumulated in double.
double SumExpShifted(std::span<const float> logits, float max);

// Steps 2-4 of Sample in place: logit_bias, the min_tokens ban and the penalties. Leaves the raw
// logit of every token it changes in scratch.saved_raw (for FallbackToken) and scratch.counts /
// flags all zero again.
void ApplyLogitProcessors(std::span<float> logits, const SamplerInput& input,
                          SamplerScratch& scratch);

// The token Sample returns when no logit is finite after ApplyLogitProcessors (see sampler.h),
// from scratch.saved_raw as ApplyLogitProcessors left it. May allocate (a rare path).
int32_t FallbackToken(int32_t vocab_size, const SamplerInput& input, const SamplerScratch& scratch);

// Greedy choice: the first index of the largest logit (NaN counting as -inf); -1 when every
// logit is -inf or NaN.
int32_t Argmax(std::span<const float> logits);

// Turns processed logits into unnormalised probabilities in place: NaN becomes -inf, +inf the
// largest finite float, then w = exp((logit - max) * min(1 / temperature, FLT_MAX)), so the
// most likely token has w == 1 exactly. Returns the sum of w (f32 blocks accumulated in
// double), or 0 when no logit is finite (logits are then left sanitised but not
// exponentiated). temperature > 0.
double ComputeWeights(std::span<float> logits, float temperature);

// Steps 5 (truncation) and 6 (the draw) over weights from ComputeWeights (all in [0, 1], the
// largest exactly 1), whose sum is `total`: returns the chosen token for the uniform `u` in
// [0, 1). Sorts only as much of the vocabulary
// as the filters and the draw need (see sampler.h for the semantics, draw.cc for the method).
int32_t DrawFromWeights(std::span<const float> weights, double total, const SamplingParams& params,
                        double u, SamplerScratch& scratch);

// Writes to keys[0, count) the WeightKey of every token with lo <= weight < hi, in id order, and
// returns count. keys must have room for count entries.
int32_t GatherKeys(std::span<const float> weights, float lo, float hi, uint64_t* keys);

// Number of weights >= threshold.
int32_t CountAtLeast(std::span<const float> weights, float threshold);

// Number of logits > threshold (>= when or_equal), NaN counting as -inf and +inf as the largest
// finite float.
int32_t CountAbove(std::span<const float> logits, float threshold, bool or_equal);

// The first index i >= begin whose logit (counted as in CountAbove) is > threshold, or the
// vocabulary size when there is none.
size_t FindAbove(std::span<const float> logits, size_t begin, float threshold);

// Sort key of a token with weight w >= 0: ascending keys order tokens by w descending, then by
// id ascending.
inline uint64_t WeightKey(float w, int32_t id) {
  return (static_cast<uint64_t>(~std::bit_cast<uint32_t>(w)) << 32) | static_cast<uint32_t>(id);
}
inline int32_t KeyToken(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

}  // namespace loom::sampling_internal
