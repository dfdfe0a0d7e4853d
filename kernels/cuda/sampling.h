// CUDA sampling: one token per row of a logits matrix, equal to the token the CPU sampler
// (engine/sampling/sampler.h, `Sample`) returns for the same logits and parameters.
//
//   logits:       [num_rows, vocab] f32, device, rows contiguous. Used as scratch: on return,
//                 each penalised token's logit holds its penalised value (every other logit is
//                 unchanged).
//   rows:         [num_rows] DeviceSamplingRow (kernels/common/sampling_args.h), device
//   penalty_ids:  the rows' prompt and output token ids, concatenated (see DeviceSamplingRow),
//                 device; may be null when no row has a penalty list
//   out_tokens:   [num_rows] i32, device: the sampled token of each row, always in [0, vocab)
//
// Supported: temperature (0 = greedy), top_k, top_p, min_p, repetition / frequency / presence
// penalties and the (seed, output index) draw. Not supported (the host sampler keeps them):
// log-probabilities, logit_bias and the min_tokens ban; engine/sampling/device_sampling_params.h
// says which requests qualify and packs their rows.
//
// Pipeline, all rows in every launch (CUDA-graph capturable: the launches depend only on
// num_rows and vocab, nothing is read back to the host and nothing is allocated):
//   1. Penalties, one CTA per row: per-token output counts in a vocabulary-sized cell array (in
//      the workspace, only the listed tokens' cells are cleared), then every distinct listed
//      token is penalised exactly once, in place: repetition (prompt or output), then frequency
//      and presence (output). The raw value of the best penalised token is kept for the CPU's
//      all -inf fallback.
//   2. Per 8192-entry slice: the largest logit and its first index (NaN as -inf).
//   3. Random rows, per slice: the weights w = exp((Sanitize(x) - max) * min(1/T, FLT_MAX)) by
//      the CPU's own exp polynomial, each operation an IEEE f32 operation without fused
//      multiply-add, so every weight has the CPU's bits; per 512-entry block the sum of weights
//      with the CPU's lane structure and tree (16 sequential f32 partials, tail into the first
//      4, pairwise tree), so the total (block sums added in double in block order) is the CPU's
//      to the bit; the count of w >= min_p; and a histogram of the weights' float exponents.
//   4. Random rows: the tokens whose weight exponent is at least a per-row threshold are
//      written as 64-bit keys (weight descending, id ascending: a total order) and sorted per
//      row (cub segmented radix sort). The threshold is chosen from the histogram so that the
//      kept tokens provably include every sorted position the CPU's filters and draw look at
//      (at least top_k tokens; every token with w >= min_p; or, from an upper bound of the mass
//      below it, more than (p + 2^-12) of the total for the top-p / draw target p; see
//      sampling.cu). The candidates are therefore exactly a prefix of the CPU's sorted order.
//   5. One CTA per row: greedy rows take the argmax; random rows run the CPU's truncation and
//      draw over the sorted prefix. The CPU adds cumulative mass in double, sequentially along
//      the sorted order. The device computes the same prefix sums with a parallel block scan in
//      double together with a bound on its difference from the sequential sums (both are within
//      about p * 2^-53 relative of the exact sum at position p; the bound used is
//      p * 2^-50 * c). Every comparison the CPU makes (top-p target, draw target) is decided from
//      the bounds; when a decision is not certain (a target within the bound of a prefix sum:
//      ties and exactly representable sums do this, random data practically never), that row
//      reruns the CPU's exact sequential loop on one thread. The token is therefore the CPU's in
//      every case; the scan is only a fast path.
//   When no logit is finite after the penalties, the row returns the CPU's fallback: the best
//   raw logit among the penalised tokens (NaN as -inf, ties to the lowest id), else token 0.
//
// Exactness needs IEEE f32/f64 arithmetic on the device: no --use_fast_math, no -ftz (the
// kernels use explicit _rn intrinsics where nvcc would otherwise contract into FMA).
//
// Bytes moved per row: the logits are read three times (12 * vocab bytes) for a random row and
// once for a greedy one; the candidate keys are written, sorted (8 bytes per candidate per
// radix pass) and read by the draw. For peaked distributions the candidates are a few hundred
// tokens; a flat one (high temperature, no filters) sorts most of the vocabulary.
//
// Plain C++ header: every pointer is a device pointer; the launcher queues kernels on `stream`
// and returns the first launch error. It never allocates or synchronises.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/sampling_args.h"

namespace loom::cuda {

// Bytes of device workspace Sample needs for this shape (about 16 * num_rows * vocab bytes plus
// small per-row arrays); 0 when the shape is not supported (see Sample). Pure host arithmetic.
size_t SampleWorkspaceBytes(int32_t num_rows, int32_t vocab);

// Samples out_tokens[r] from logits row r with rows[r], for r < num_rows. `workspace` is device
// memory of at least SampleWorkspaceBytes(num_rows, vocab) bytes, 256-byte aligned; its contents
// are the sampler's own (nothing carries over between calls). The rows, logits, penalty ids,
// workspace and out_tokens must not be modified by other work while the launch runs.
//
// Returns cudaErrorInvalidValue for vocab < 1, num_rows < 0 or > 65535, num_rows * vocab >=
// 2^31, a null pointer where data is needed, a misaligned or too small workspace; cudaSuccess
// without a launch when num_rows == 0. Row parameters are trusted (validated by the server as
// for the CPU sampler).
cudaError_t Sample(float* logits, int32_t num_rows, int32_t vocab, const DeviceSamplingRow* rows,
                   const int32_t* penalty_ids, void* workspace, size_t workspace_bytes,
                   int32_t* out_tokens, cudaStream_t stream);

}  // namespace loom::cuda
