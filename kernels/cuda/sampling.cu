// CUDA sampling, steps 1-4 (penalties, row max, weights, candidates and their sort) and the
// launcher; the contract is in sampling.h, the draw (step 5) in sampling_draw.cu.
//
// Work split:
//   PenaltyKernel      one 512-thread CTA per row; threads stride over the row's penalty ids.
//   SliceMaxKernel     one 256-thread CTA per (8192-logit slice, row); reads the slice once.
//   WeightStatsKernel  same grid; half-warp h of the CTA owns the slice's 512-entry block h and
//                      lane j of it the CPU's partial sum j (entries j, j + 16, ...), so the
//                      block sum is the CPU's f32 sum bit for bit.
//   CompactKernel      same grid; writes the keys of the row's candidates (order is immaterial:
//                      keys are distinct and sorted next).
#include "kernels/cuda/sampling.h"

#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <bit>

#include "kernels/cuda/sampling_inl.cuh"

namespace loom::cuda {
namespace sampling {
namespace {

constexpr int kPenaltyThreads = 512;
// Output counts and the "already penalised" flag share one u32 cell per token.
constexpr uint32_t kClaimed = 1u << 31;
constexpr uint32_t kCountMask = kClaimed - 1;
constexpr uint32_t kNoExponent = 0xFFFFFFFFu;
// Fixed room for cub's temporary storage (in place sort of keys only: a few hundred bytes); the
// launcher checks cub's actual request against it.
constexpr size_t kSortTempBytes = 64 << 10;
constexpr size_t kAlign = 256;

__device__ __forceinline__ bool IsRandom(const DeviceSamplingRow& row) {
  return row.temperature != 0.0f;
}

// Hugging Face repetition penalty (sampler.cc RepetitionPenalty).
__device__ __forceinline__ float RepetitionPenalty(float logit, float penalty) {
  return logit > 0.0f ? __fdiv_rn(logit, penalty) : __fmul_rn(logit, penalty);
}

// Orders (raw value, token) as the CPU's fallback does: larger value first (NaN and -inf never
// get here, -0 equals +0), then lower token. Never 0.
__device__ __forceinline__ unsigned long long FallbackKey(float value, int32_t token) {
  if (value == 0.0f) value = 0.0f;
  const uint32_t bits = __float_as_uint(value);
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) |
         (0xFFFFFFFFu - static_cast<uint32_t>(token));
}

// Step 1. Also resets the row's stats and candidate segment for the later kernels.
__global__ void __launch_bounds__(kPenaltyThreads) PenaltyKernel(SampleArgs a) {
  const int32_t r = blockIdx.x;
  const DeviceSamplingRow row = a.rows[r];
  RowStats& stats = a.ws.stats[r];
  for (int i = threadIdx.x; i < kNumExponents; i += blockDim.x) stats.exponent_count[i] = 0;
  __shared__ unsigned long long best;
  if (threadIdx.x == 0) {
    stats.min_p_count = 0;
    a.ws.segment_begin[r] = a.ws.segment_end[r] = r * a.vocab;
    best = 0;
  }
  const bool repetition = row.repetition_penalty != 1.0f;
  const bool additive = row.frequency_penalty != 0.0f || row.presence_penalty != 0.0f;
  if ((repetition || additive) && a.penalty_ids != nullptr) {
    // Entries [0, num_output) are the output ids, then (repetition only) the prompt ids.
    const int32_t* prompt = a.penalty_ids + row.penalty_begin;
    const int32_t* output = prompt + row.num_prompt_tokens;
    const int64_t num_output = max(row.num_output_tokens, 0);
    const int64_t num_entries = num_output + (repetition ? max(row.num_prompt_tokens, 0) : 0);
    const auto entry = [&](int64_t e) {
      return e < num_output ? output[e] : prompt[e - num_output];
    };
    uint32_t* cells = reinterpret_cast<uint32_t*>(a.ws.keys_a + int64_t{r} * a.vocab);
    float* logits = a.logits + int64_t{r} * a.vocab;
    for (int64_t e = threadIdx.x; e < num_entries; e += blockDim.x) {
      const int32_t token = entry(e);
      if (token >= 0 && token < a.vocab) cells[token] = 0;
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < num_output; e += blockDim.x) {
      const int32_t token = output[e];
      if (token >= 0 && token < a.vocab) atomicAdd(&cells[token], 1u);
    }
    __syncthreads();
    // The first entry to claim a token applies everything that token gets, as the CPU does on
    // a token's first occurrence: output tokens repetition then frequency/presence, prompt-only
    // tokens repetition.
    for (int64_t e = threadIdx.x; e < num_entries; e += blockDim.x) {
      const int32_t token = entry(e);
      if (token < 0 || token >= a.vocab) continue;
      const uint32_t old = atomicOr(&cells[token], kClaimed);
      if (old & kClaimed) continue;
      const float raw = logits[token];
      const uint32_t count = old & kCountMask;
      float x = raw;
      if (repetition) x = RepetitionPenalty(x, row.repetition_penalty);
      if (additive && count > 0) {
        const float sub =
            __fadd_rn(__fmul_rn(row.frequency_penalty, __int2float_rn(static_cast<int>(count))),
                      row.presence_penalty);
        x = __fsub_rn(x, sub);
      }
      logits[token] = x;
      const float value = Sanitize(raw);
      if (value != -INFINITY) atomicMax(&best, FallbackKey(value, token));
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    stats.fallback_token =
        best == 0 ? 0 : static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(best));
  }
}

// Step 2: the best logit of each slice.
__global__ void __launch_bounds__(kSliceThreads) SliceMaxKernel(SampleArgs a) {
  __shared__ SliceBest scratch[kSliceThreads / 32];
  const int32_t r = blockIdx.y;
  const int64_t begin = int64_t{blockIdx.x} * kSliceLen;
  const int64_t end = min(int64_t{a.vocab}, begin + kSliceLen);
  const float* logits = a.logits + int64_t{r} * a.vocab;
  SliceBest best{-INFINITY, INT32_MAX};
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float x = logits[i];
    const SliceBest here{x == x ? x : -INFINITY, static_cast<int32_t>(i)};
    if (Better(here, best)) best = here;
  }
  best = BlockBest(best, scratch);
  if (threadIdx.x == 0) a.ws.slice_best[int64_t{r} * a.num_slices + blockIdx.x] = best;
}

// The row's sanitized max and weight scale; false when the row is greedy or has no finite
// logit (nothing to compute for it).
__device__ __forceinline__ bool RandomRowScale(const SampleArgs& a, int32_t r, SliceBest* scratch,
                                               float* row_max, float* scale) {
  const DeviceSamplingRow& row = a.rows[r];
  if (!IsRandom(row)) return false;
  *row_max = Sanitize(RowBest(a, r, scratch).value);
  *scale = WeightScale(row.temperature);
  return *row_max != -INFINITY;
}

// Step 3: block sums of weights, the min-p count and the exponent histogram.
__global__ void __launch_bounds__(kSliceThreads) WeightStatsKernel(SampleArgs a) {
  __shared__ SliceBest best_scratch[kSliceThreads / 32];
  __shared__ int32_t count_scratch[kSliceThreads / 32];
  __shared__ int32_t histogram[kNumExponents];
  const int32_t r = blockIdx.y;
  float row_max, scale;
  if (!RandomRowScale(a, r, best_scratch, &row_max, &scale)) return;
  const float min_p = a.rows[r].min_p;
  for (int i = threadIdx.x; i < kNumExponents; i += blockDim.x) histogram[i] = 0;
  __syncthreads();

  const float* logits = a.logits + int64_t{r} * a.vocab;
  const int32_t lane = threadIdx.x % kNumPartials;
  const int64_t block =
      int64_t{blockIdx.x} * (kSliceThreads / kNumPartials) + threadIdx.x / kNumPartials;
  const int64_t begin = block * kSumBlock;
  const int64_t end = min(int64_t{a.vocab}, begin + kSumBlock);
  const int32_t len = begin < end ? static_cast<int32_t>(end - begin) : 0;
  const int32_t num_full = len / kNumPartials;
  const int64_t tail = begin + int64_t{num_full} * kNumPartials;
  const int32_t tail_len = len - num_full * kNumPartials;
  float partial = 0.0f;
  int32_t min_p_count = 0;
  // Step s < 32: full 16-entry chunk s (entry begin + 16 s + lane). Steps 32..35: the tail,
  // whose entry tail + 4 t + j goes to partial j < 4 (the CPU's 4-lane tail loop). Every lane of
  // the warp runs every step, so the histogram update can be aggregated over the warp.
  for (int32_t step = 0; step < kSumBlock / kNumPartials + 4; ++step) {
    int64_t i = -1;
    if (step < num_full) {
      i = begin + int64_t{step} * kNumPartials + lane;
    } else if (step >= kSumBlock / kNumPartials && lane < 4) {
      const int32_t q = lane + 4 * (step - kSumBlock / kNumPartials);
      if (q < tail_len) i = tail + q;
    }
    uint32_t exponent = kNoExponent;
    if (i >= 0) {
      const float w = Weight(logits[i], row_max, scale);
      partial = __fadd_rn(partial, w);
      min_p_count += min_p > 0.0f && w >= min_p;
      exponent = __float_as_uint(w) >> 23;
    }
    const uint32_t same = __match_any_sync(0xffffffffu, exponent);
    if (exponent != kNoExponent && (threadIdx.x % 32) == __ffs(same) - 1) {
      atomicAdd(&histogram[exponent], __popc(same));
    }
  }
  // The CPU's SumPartials: pairs, quads, then (q0 + q1) + (q2 + q3), within each half-warp.
#pragma unroll
  for (int offset = 1; offset < kNumPartials; offset *= 2) {
    partial = __fadd_rn(partial, __shfl_down_sync(0xffffffffu, partial, offset, kNumPartials));
  }
  if (lane == 0 && len > 0) a.ws.block_sums[int64_t{r} * a.num_sum_blocks + block] = partial;

  min_p_count = BlockSum(min_p_count, count_scratch);  // synchronises: the histogram is complete
  RowStats& stats = a.ws.stats[r];
  if (threadIdx.x == 0 && min_p_count > 0) atomicAdd(&stats.min_p_count, min_p_count);
  for (int i = threadIdx.x; i < kNumExponents; i += blockDim.x) {
    if (histogram[i] > 0) atomicAdd(&stats.exponent_count[i], histogram[i]);
  }
}

// The largest exponent field e >= 1 such that the weights below 2^(e - 127) provably hold at most
// (1 - frac - 2^-11) of the total, or 0 (all tokens). Each exponent bucket E holds weights below
// 2^(E - 126), which bounds its mass. With total_est within 3e-6 of the exact total (f32 block
// sums), the tokens at or above the threshold then hold more than (frac + 2^-12) of the exact
// total, which exceeds any CPU target frac * total (the CPU's sums are within 3e-6 too).
__device__ int32_t MassExponent(const int32_t* counts, double frac, double total_est) {
  const double allowed = (1.0 - frac - 0x1p-11) * total_est;
  if (!(allowed >= 0.0)) return 0;
  double bound = 0.0;
  int32_t best = 0;
  for (int32_t e = 1; e < kNumExponents; ++e) {
    bound += ldexp(static_cast<double>(counts[e - 1]), e - 1 - 126);
    if (bound > allowed) break;
    best = e;
  }
  return best;
}

// The candidates' exponent threshold: the row's candidates (exponent field >= it) are a prefix
// of the CPU's sorted order that holds every position its filters and draw read (sampling.h).
__device__ int32_t CandidateExponent(const DeviceSamplingRow& row, const int32_t* counts,
                                     int32_t vocab, double total_est, double u) {
  const int32_t k = row.top_k > 0 && row.top_k < vocab ? row.top_k : vocab;
  if (k < vocab) {  // the CPU reads positions < k only
    int64_t above = 0;
    for (int32_t e = kNumExponents - 1; e >= 1; --e) {
      above += counts[e];
      if (above >= k) return e;
    }
    return 0;
  }
  if (row.min_p > 0.0f) {  // kept <= #(w >= min_p) <= #(w >= 2^(e - 127))
    int32_t e = static_cast<int32_t>(__float_as_uint(row.min_p) >> 23);
    if (row.top_p < 1.0f) e = max(e, MassExponent(counts, row.top_p, total_est));
    return e;
  }
  return MassExponent(counts, row.top_p < 1.0f ? static_cast<double>(row.top_p) : u, total_est);
}

// Step 4: the keys of the row's candidates, appended to its segment.
__global__ void __launch_bounds__(kSliceThreads) CompactKernel(SampleArgs a) {
  __shared__ SliceBest best_scratch[kSliceThreads / 32];
  __shared__ double sum_scratch[kSliceThreads / 32];
  __shared__ int32_t threshold;
  const int32_t r = blockIdx.y;
  float row_max, scale;
  if (!RandomRowScale(a, r, best_scratch, &row_max, &scale)) return;
  const DeviceSamplingRow row = a.rows[r];
  double total_est = 0.0;
  for (int32_t b = threadIdx.x; b < a.num_sum_blocks; b += blockDim.x) {
    total_est += a.ws.block_sums[int64_t{r} * a.num_sum_blocks + b];
  }
  total_est = BlockSum(total_est, sum_scratch);
  if (threadIdx.x == 0) {
    const double u = CounterUniform(row.seed, static_cast<uint64_t>(row.output_index));
    threshold = CandidateExponent(row, a.ws.stats[r].exponent_count, a.vocab, total_est, u);
  }
  __syncthreads();
  const uint32_t min_exponent = static_cast<uint32_t>(threshold);

  const float* logits = a.logits + int64_t{r} * a.vocab;
  uint64_t* keys = a.ws.keys_a;
  const int64_t begin = int64_t{blockIdx.x} * kSliceLen;
  const int32_t lane = threadIdx.x % 32;
  for (int32_t step = 0; step < kSliceLen / kSliceThreads; ++step) {
    const int64_t i = begin + int64_t{step} * kSliceThreads + threadIdx.x;
    float w = 0.0f;
    bool keep = false;
    if (i < a.vocab) {
      w = Weight(logits[i], row_max, scale);
      keep = (__float_as_uint(w) >> 23) >= min_exponent;
    }
    const uint32_t ballot = __ballot_sync(0xffffffffu, keep);
    if (ballot == 0) continue;
    int32_t base = 0;
    if (lane == __ffs(ballot) - 1) base = atomicAdd(&a.ws.segment_end[r], __popc(ballot));
    base = __shfl_sync(0xffffffffu, base, __ffs(ballot) - 1);
    if (keep) {
      keys[base + __popc(ballot & ((1u << lane) - 1))] =
          WeightKey(w, static_cast<int32_t>(i), a.id_bits);
    }
  }
}

struct Plan {
  int32_t num_slices, num_sum_blocks, id_bits;
  size_t keys, segments, slice_best, block_sums, stats, sort_temp, total;  // byte offsets / size
};

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The workspace layout for a shape; total == 0 when the shape is not supported.
Plan PlanWorkspace(int32_t num_rows, int32_t vocab) {
  Plan p{};
  if (num_rows < 1 || num_rows > 65535 || vocab < 1 ||
      int64_t{num_rows} * vocab > int64_t{INT32_MAX}) {
    return p;
  }
  const size_t rows = static_cast<size_t>(num_rows);
  const size_t items = rows * static_cast<size_t>(vocab);
  p.num_slices = static_cast<int32_t>((int64_t{vocab} + kSliceLen - 1) / kSliceLen);
  p.num_sum_blocks = static_cast<int32_t>((int64_t{vocab} + kSumBlock - 1) / kSumBlock);
  p.id_bits = std::max(1, static_cast<int32_t>(std::bit_width(static_cast<uint32_t>(vocab - 1))));
  size_t at = 0;
  p.keys = at;
  at += 2 * AlignUp(items * sizeof(uint64_t));
  p.segments = at;
  at += 2 * AlignUp(rows * sizeof(int32_t));
  p.slice_best = at;
  at += AlignUp(rows * p.num_slices * sizeof(SliceBest));
  p.block_sums = at;
  at += AlignUp(rows * p.num_sum_blocks * sizeof(float));
  p.stats = at;
  at += AlignUp(rows * sizeof(RowStats));
  p.sort_temp = at;
  at += kSortTempBytes;
  p.total = at;
  return p;
}

}  // namespace
}  // namespace sampling

size_t SampleWorkspaceBytes(int32_t num_rows, int32_t vocab) {
  return sampling::PlanWorkspace(num_rows, vocab).total;
}

cudaError_t Sample(float* logits, int32_t num_rows, int32_t vocab, const DeviceSamplingRow* rows,
                   const int32_t* penalty_ids, void* workspace, size_t workspace_bytes,
                   int32_t* out_tokens, cudaStream_t stream) {
  using namespace sampling;
  if (num_rows == 0 && vocab >= 1) return cudaSuccess;
  const Plan plan = PlanWorkspace(num_rows, vocab);
  if (plan.total == 0 || logits == nullptr || rows == nullptr || out_tokens == nullptr ||
      workspace == nullptr || workspace_bytes < plan.total ||
      reinterpret_cast<uintptr_t>(workspace) % kAlign != 0) {
    return cudaErrorInvalidValue;
  }
  char* base = static_cast<char*>(workspace);
  const size_t items = static_cast<size_t>(num_rows) * static_cast<size_t>(vocab);
  SampleArgs a{};
  a.logits = logits;
  a.num_rows = num_rows;
  a.vocab = vocab;
  a.num_slices = plan.num_slices;
  a.num_sum_blocks = plan.num_sum_blocks;
  a.id_bits = plan.id_bits;
  a.rows = rows;
  a.penalty_ids = penalty_ids;
  a.out_tokens = out_tokens;
  a.ws.keys_a = reinterpret_cast<uint64_t*>(base + plan.keys);
  a.ws.keys_b = reinterpret_cast<uint64_t*>(base + plan.keys + AlignUp(items * sizeof(uint64_t)));
  a.ws.segment_begin = reinterpret_cast<int32_t*>(base + plan.segments);
  a.ws.segment_end =
      reinterpret_cast<int32_t*>(base + plan.segments + AlignUp(num_rows * sizeof(int32_t)));
  a.ws.slice_best = reinterpret_cast<SliceBest*>(base + plan.slice_best);
  a.ws.block_sums = reinterpret_cast<float*>(base + plan.block_sums);
  a.ws.stats = reinterpret_cast<RowStats*>(base + plan.stats);
  a.ws.sort_temp = base + plan.sort_temp;
  a.ws.sort_temp_bytes = kSortTempBytes;

  PenaltyKernel<<<num_rows, kPenaltyThreads, 0, stream>>>(a);
  const dim3 grid(static_cast<unsigned>(plan.num_slices), static_cast<unsigned>(num_rows));
  SliceMaxKernel<<<grid, kSliceThreads, 0, stream>>>(a);
  WeightStatsKernel<<<grid, kSliceThreads, 0, stream>>>(a);
  CompactKernel<<<grid, kSliceThreads, 0, stream>>>(a);
  if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) return error;

  // Keys hold 30 weight bits above id_bits id bits; the result lands in keys.Current().
  cub::DoubleBuffer<uint64_t> keys(a.ws.keys_a, a.ws.keys_b);
  const int end_bit = 30 + plan.id_bits;
  size_t temp_bytes = 0;
  cudaError_t error = cub::DeviceSegmentedRadixSort::SortKeys(
      nullptr, temp_bytes, keys, static_cast<int>(items), num_rows, a.ws.segment_begin,
      a.ws.segment_end, 0, end_bit, stream);
  if (error != cudaSuccess) return error;
  if (temp_bytes > a.ws.sort_temp_bytes) return cudaErrorInvalidValue;
  error = cub::DeviceSegmentedRadixSort::SortKeys(
      a.ws.sort_temp, temp_bytes, keys, static_cast<int>(items), num_rows, a.ws.segment_begin,
      a.ws.segment_end, 0, end_bit, stream);
  if (error != cudaSuccess) return error;
  a.sorted_keys = keys.Current();
  return LaunchDraw(a, stream);
}

}  // namespace loom::cuda
