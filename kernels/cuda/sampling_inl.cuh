// Shared pieces of the CUDA sampler (sampling.cu, sampling_draw.cu): the workspace layout, the
// kernels' argument block, and device copies of the CPU sampler's arithmetic. Device code; only
// kernels/cuda/sampling*.cu include it.
//
// The arithmetic must give the CPU sampler's bits (engine/sampling/simd.h, reductions.cc,
// random.h), so every f32 operation is written as an _rn intrinsic: nvcc would otherwise fuse a
// multiply and an add into one FMA, which the CPU (SSE2/AVX2 without FMA) never does.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstddef>
#include <cstdint>

#include "kernels/common/sampling_args.h"

namespace loom::cuda::sampling {

// ---- shapes ----

// The CPU sums weights in blocks of 512 (reductions.cc kBlock), 16 partial sums per block.
inline constexpr int32_t kSumBlock = 512;
inline constexpr int32_t kNumPartials = 16;
// The whole-vocabulary kernels give each CTA a slice of 16 such blocks: one per half-warp of a
// 256-thread CTA.
inline constexpr int32_t kSliceThreads = 256;
inline constexpr int32_t kSliceLen = kSumBlock * (kSliceThreads / kNumPartials);  // 8192
// Float exponent fields of weights in [0, 1]: 0 (zero or subnormal) to 127 (exactly 1).
inline constexpr int32_t kNumExponents = 128;

// The best logit of one slice: largest value (NaN counted as -inf), then lowest index.
struct SliceBest {
  float value;
  int32_t index;
};

// Per-row results of the penalty and weight kernels.
struct RowStats {
  int32_t exponent_count[kNumExponents];  // weights per float exponent field
  int32_t min_p_count;                    // weights >= min_p (when min_p > 0)
  int32_t fallback_token;                 // the CPU's choice when no logit is finite
  int32_t reserved[2];
};

// Where everything lives in the caller's workspace (PlanWorkspace in sampling.cu).
struct Workspace {
  // [num_rows, vocab] each: candidate keys and the radix sort's second buffer. Row r's part of
  // keys_a first serves the penalty kernel as vocab u32 count cells.
  uint64_t* keys_a;
  uint64_t* keys_b;
  int32_t* segment_begin;  // [num_rows]: r * vocab
  int32_t* segment_end;    // [num_rows]: r * vocab + number of candidates
  SliceBest* slice_best;   // [num_rows, num_slices]
  float* block_sums;       // [num_rows, num_sum_blocks]
  RowStats* stats;         // [num_rows]
  void* sort_temp;
  size_t sort_temp_bytes;
};

struct SampleArgs {
  float* logits;
  int32_t num_rows;
  int32_t vocab;
  int32_t num_slices;      // ceil(vocab / kSliceLen)
  int32_t num_sum_blocks;  // ceil(vocab / kSumBlock)
  int32_t id_bits;         // bits of a token id in a key: bit width of vocab - 1, at least 1
  const DeviceSamplingRow* rows;
  const int32_t* penalty_ids;
  Workspace ws;
  const uint64_t* sorted_keys;  // the sort's output buffer (keys_a or keys_b)
  int32_t* out_tokens;
};

// The draw kernel (sampling_draw.cu); queued after the sort.
cudaError_t LaunchDraw(const SampleArgs& args, cudaStream_t stream);

// ---- the CPU sampler's arithmetic ----

// NaN -> -inf, +inf -> largest finite float (simd.h SanitizeInPlace).
__device__ __forceinline__ float Sanitize(float x) {
  x = x == x ? x : -INFINITY;
  return x < FLT_MAX ? x : FLT_MAX;
}

// exp(x) for x <= 0 by the CPU's Cody-Waite reduction and polynomial (simd.h
// ExpNonPositiveInPlace), one rounded f32 operation at a time, in the CPU's order.
__device__ __forceinline__ float ExpNonPositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;
  const bool underflow = x < -87.0f;
  const float clamped = underflow ? -87.0f : x;
  const float n = __fsub_rn(__fadd_rn(__fmul_rn(clamped, kLog2e), kRoundMagic), kRoundMagic);
  const float r = __fsub_rn(__fsub_rn(clamped, __fmul_rn(n, kLn2Hi)), __fmul_rn(n, kLn2Lo));
  float p = 1.9875691500e-4f;
  p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
  p = __fadd_rn(__fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r), 1.0f);
  const float scale = __int_as_float((__float2int_rz(n) + 127) << 23);
  const float result = __fmul_rn(p, scale);
  return underflow ? 0.0f : result;
}

// min(1 / temperature, FLT_MAX), as reductions.cc ComputeWeights writes it.
__device__ __forceinline__ float WeightScale(float temperature) {
  const float scale = __fdiv_rn(1.0f, temperature);
  return FLT_MAX < scale ? FLT_MAX : scale;
}

// The unnormalised probability of a processed logit, given the row's sanitized max and scale.
__device__ __forceinline__ float Weight(float logit, float max, float scale) {
  return ExpNonPositive(__fmul_rn(__fsub_rn(Sanitize(logit), max), scale));
}

// random.h: SplitMix64's finaliser, applied to the seed and then to the counter's position.
__device__ __forceinline__ uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
__device__ __forceinline__ double CounterUniform(uint64_t seed, uint64_t counter) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
  const uint64_t bits = Mix64(Mix64(seed ^ 0x6A09E667F3BCC909ULL) + kGolden * (counter + 1));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Sort key of a weight w in [0, 1] and a token id: ascending keys order by weight descending,
// then id ascending. The 30 low bits of w's pattern (bits 30-31 are 0 for w <= 1) above the id.
__device__ __forceinline__ uint64_t WeightKey(float w, int32_t id, int32_t id_bits) {
  return (static_cast<uint64_t>(0x3FFFFFFFu - __float_as_uint(w)) << id_bits) |
         static_cast<uint32_t>(id);
}
__device__ __forceinline__ float KeyWeight(uint64_t key, int32_t id_bits) {
  return __uint_as_float(0x3FFFFFFFu - static_cast<uint32_t>(key >> id_bits));
}
__device__ __forceinline__ int32_t KeyToken(uint64_t key, int32_t id_bits) {
  return static_cast<int32_t>(key & ((uint64_t{1} << id_bits) - 1));
}

// ---- block helpers (every thread of the block must call them) ----

__device__ __forceinline__ bool Better(const SliceBest& a, const SliceBest& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

__device__ __forceinline__ SliceBest WarpBest(SliceBest best) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    SliceBest other;
    other.value = __shfl_xor_sync(0xffffffffu, best.value, offset);
    other.index = __shfl_xor_sync(0xffffffffu, best.index, offset);
    if (Better(other, best)) best = other;
  }
  return best;
}

// The best of every thread's `best`, returned to all threads. `scratch` holds one entry per warp.
__device__ __forceinline__ SliceBest BlockBest(SliceBest best, SliceBest* scratch) {
  best = WarpBest(best);
  const int num_warps = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = best;
  __syncthreads();
  best = scratch[0];
  for (int w = 1; w < num_warps; ++w) {
    if (Better(scratch[w], best)) best = scratch[w];
  }
  __syncthreads();
  return best;
}

// The best logit of row `row` from its slices' results.
__device__ __forceinline__ SliceBest RowBest(const SampleArgs& a, int32_t row, SliceBest* scratch) {
  SliceBest best{-INFINITY, INT32_MAX};
  const SliceBest* slices = a.ws.slice_best + int64_t{row} * a.num_slices;
  for (int32_t s = threadIdx.x; s < a.num_slices; s += blockDim.x) {
    if (Better(slices[s], best)) best = slices[s];
  }
  return BlockBest(best, scratch);
}

// Sum over the block, returned to all threads (in a fixed order for a fixed block size).
template <typename T>
__device__ __forceinline__ T BlockSum(T value, T* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  const int num_warps = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = value;
  __syncthreads();
  value = scratch[0];
  for (int w = 1; w < num_warps; ++w) value += scratch[w];
  __syncthreads();
  return value;
}

}  // namespace loom::cuda::sampling
