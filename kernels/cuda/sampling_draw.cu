// CUDA sampling, step 5: greedy choice, truncation (top-k, top-p, min-p) and the draw over each
// row's sorted candidates (sampling.h).
//
// One 256-thread CTA per row. The CPU (engine/sampling/draw.cc) walks the sorted order adding
// weights in double one at a time. Here the CTA scans tiles of 1024 positions (4 per thread)
// with a block-wide scan in double, which rounds differently; each prefix sum c at position p
// comes with the bound |c_cpu - c| <= p * 2^-50 * c (both sums lie within p * 2^-53 relative of
// the exact one; a factor 2 over that covers both, another 2 the rounding of the bounds
// themselves). A comparison with a target is "certain" when it holds for every value inside
// the bounds. The CPU's comparisons are monotone along the order (its prefix sums never
// decrease), so the first position where the CPU's comparison holds lies between the first
// position where it possibly holds and the first where it certainly holds; when these
// coincide the decision is the CPU's. Otherwise thread 0 replays the CPU's sequential loops
// exactly (ExactDraw). Position 0 and the row total are exact on both sides (bound 0), so
// decisions there are always taken directly.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/sampling_inl.cuh"

namespace loom::cuda::sampling {
namespace {

constexpr int kDrawThreads = 256;
constexpr int kItems = 4;
constexpr int32_t kTile = kDrawThreads * kItems;
constexpr double kBoundPerPosition = 0x1p-50;
constexpr int32_t kNone = INT32_MAX;

// A prefix sum and a bound on its distance from the CPU's.
struct Bounded {
  double value;
  double err;
};

struct DrawShared {
  double warp_sums[kDrawThreads / 32];
  SliceBest best_scratch[kDrawThreads / 32];
  int32_t count_scratch[kDrawThreads / 32];
  int32_t possibly;
  int32_t certainly;
  Bounded at_certainly;
  Bounded at_query;
  double total;
  int32_t token;
};

// What the draw needs to know about one random row.
struct DrawRow {
  const uint64_t* keys;  // sorted candidates: the first num_candidates positions of the order
  int32_t num_candidates;
  int32_t id_bits;
  int32_t n;      // vocabulary
  int32_t k;      // top-k, n when off
  int32_t kept0;  // min(k, max(1, #(w >= min_p))) with min-p, else k
  float top_p;
  double total;  // the CPU's total weight, bit for bit
  double u;      // the uniform
};

__device__ __forceinline__ double WeightAt(const DrawRow& d, int32_t pos) {
  return pos < d.num_candidates ? static_cast<double>(KeyWeight(d.keys[pos], d.id_bits)) : 0.0;
}
__device__ __forceinline__ int32_t TokenAt(const DrawRow& d, int32_t pos) {
  return pos < d.num_candidates ? KeyToken(d.keys[pos], d.id_bits) : 0;
}

// Exclusive prefix of every thread's `value` over the block (adds only, no subtraction, so the
// error bound of sampling_draw.cu holds), and the block's total.
__device__ __forceinline__ double BlockExclusiveSum(double value, double* total, DrawShared& sh) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  double inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const double other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive = __dadd_rn(other, inclusive);
  }
  double exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) exclusive = 0.0;
  if (lane == 31) sh.warp_sums[warp] = inclusive;
  __syncthreads();
  double before = 0.0;
  double all = 0.0;
  for (int w = 0; w < kDrawThreads / 32; ++w) {
    if (w == warp) before = all;
    all = __dadd_rn(all, sh.warp_sums[w]);
  }
  __syncthreads();
  *total = all;
  return __dadd_rn(before, exclusive);
}

// Scans the prefix sums of positions [0, max(limit, query + 1)) (within the candidates) for the
// CPU's predicate "c >= target" (or "c > target" when strict) at positions < limit, with
// target known within target_err. Returns, in sh, the first position where the predicate
// possibly holds and the first where it certainly holds (kNone when none), the bounded sum at
// the latter, and the bounded sum at `query` (when query >= 0). The caller reads sh before its
// next call (which synchronises before overwriting it).
__device__ void FindFirst(const DrawRow& d, int32_t limit, double target, double target_err,
                          bool strict, int32_t query, DrawShared& sh) {
  limit = min(limit, d.num_candidates);
  const int32_t end = min(d.num_candidates, max(limit, query + 1));
  const double target_lo = __dsub_rn(target, target_err);
  const double target_hi = __dadd_rn(target, target_err);
  __syncthreads();  // every thread has read the previous call's results
  if (threadIdx.x == 0) {
    sh.possibly = sh.certainly = kNone;
    sh.at_certainly = sh.at_query = Bounded{0.0, 0.0};
  }
  __syncthreads();
  double running = 0.0;
  for (int32_t tile = 0; tile < end; tile += kTile) {
    const int32_t first = tile + threadIdx.x * kItems;
    double local[kItems];
    double sum = 0.0;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      sum = __dadd_rn(sum, first + j < end ? WeightAt(d, first + j) : 0.0);
      local[j] = sum;
    }
    double tile_total;
    const double base = __dadd_rn(running, BlockExclusiveSum(sum, &tile_total, sh));
    running = __dadd_rn(running, tile_total);
    Bounded c[kItems];
    int32_t possibly = kNone, certainly = kNone;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int32_t p = first + j;
      c[j].value = __dadd_rn(base, local[j]);
      c[j].err = static_cast<double>(p) * kBoundPerPosition * c[j].value;
      if (p == query) sh.at_query = c[j];
      if (p >= limit) continue;
      const double lo = __dsub_rn(c[j].value, c[j].err);
      const double hi = __dadd_rn(c[j].value, c[j].err);
      const bool maybe = strict ? hi > target_lo : hi >= target_lo;
      const bool sure = strict ? lo > target_hi : lo >= target_hi;
      if (maybe && possibly == kNone) possibly = p;
      if (sure && certainly == kNone) certainly = p;
    }
    if (possibly != kNone) atomicMin(&sh.possibly, possibly);
    if (certainly != kNone) atomicMin(&sh.certainly, certainly);
    __syncthreads();
    const int32_t found = sh.certainly;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (first + j == found) sh.at_certainly = c[j];
    }
    __syncthreads();
    if (found != kNone && query < tile + kTile) break;
  }
  __syncthreads();
}

// Positions < len whose weight is positive (they come first in the order).
__device__ int32_t CountPositive(const DrawRow& d, int32_t len, DrawShared& sh) {
  int32_t count = 0;
  for (int32_t p = threadIdx.x; p < min(len, d.num_candidates); p += blockDim.x) {
    count += WeightAt(d, p) > 0.0;
  }
  return BlockSum(count, sh.count_scratch);
}

// The CPU's truncation and draw through the bounded scan; -1 when a decision is not certain.
// Every thread returns the same value.
__device__ int32_t FastDraw(const DrawRow& d, DrawShared& sh) {
  int32_t kept = d.kept0;
  Bounded kept_mass{d.total, 0.0};
  bool have_mass = false;
  if (d.top_p < 1.0f) {
    Bounded mass{d.total, 0.0};
    if (d.k < d.n) {
      FindFirst(d, 0, 0.0, 0.0, false, d.k - 1, sh);
      mass = sh.at_query;
    }
    const double target = __dmul_rn(static_cast<double>(d.top_p), mass.value);
    const double target_err = mass.err > 0.0 ? mass.err + kBoundPerPosition * target : 0.0;
    if (kept > 1) {
      FindFirst(d, kept - 1, target, target_err, false, -1, sh);
      const int32_t possibly = sh.possibly, certainly = sh.certainly;
      if (possibly != certainly) return -1;
      if (certainly != kNone) {  // the shortest prefix reaching the target; else kept stays
        kept = certainly + 1;
        kept_mass = sh.at_certainly;
        have_mass = true;
      }
    }
  }
  if (kept < d.n && !have_mass) {
    FindFirst(d, 0, 0.0, 0.0, false, kept - 1, sh);
    kept_mass = sh.at_query;
  }
  const double target = __dmul_rn(d.u, kept_mass.value);
  const double target_err = kept_mass.err > 0.0 ? kept_mass.err + kBoundPerPosition * target : 0.0;
  FindFirst(d, kept, target, target_err, true, -1, sh);
  const int32_t possibly = sh.possibly, certainly = sh.certainly;
  __syncthreads();
  if (possibly != certainly) return -1;
  if (certainly != kNone) return TokenAt(d, certainly);
  // No cumulative sum exceeds the target (rounding): the last kept token of positive weight.
  const int32_t positive = CountPositive(d, kept, sh);
  return TokenAt(d, positive > 0 ? positive - 1 : 0);
}

// DrawFromWeights (draw.cc), sequentially, with the CPU's order of double additions.
__device__ int32_t ExactDraw(const DrawRow& d) {
  int32_t kept = d.kept0;
  if (d.top_p < 1.0f) {
    double mass = d.total;
    if (d.k < d.n) {
      double c = 0.0;
      for (int32_t p = 0; p < d.k; ++p) c = __dadd_rn(c, WeightAt(d, p));
      mass = c;
    }
    const double target = __dmul_rn(static_cast<double>(d.top_p), mass);
    int32_t len = 1;
    double c = WeightAt(d, 0);  // the cumulative mass of the first len positions
    while (len < kept && c < target) {
      c = __dadd_rn(c, WeightAt(d, len));
      ++len;
    }
    kept = len;
  }
  double kept_mass = d.total;
  if (kept < d.n) {
    double c = 0.0;
    for (int32_t p = 0; p < kept; ++p) c = __dadd_rn(c, WeightAt(d, p));
    kept_mass = c;
  }
  const double target = __dmul_rn(d.u, kept_mass);
  double c = 0.0;
  int32_t last_positive = 0;
  for (int32_t p = 0; p < kept; ++p) {
    const double w = WeightAt(d, p);
    c = __dadd_rn(c, w);
    if (c > target) return TokenAt(d, p);
    if (w > 0.0) last_positive = p;
  }
  return TokenAt(d, last_positive);
}

__global__ void __launch_bounds__(kDrawThreads) DrawKernel(SampleArgs a) {
  __shared__ DrawShared sh;
  const int32_t r = blockIdx.x;
  const DeviceSamplingRow row = a.rows[r];
  const RowStats& stats = a.ws.stats[r];
  const SliceBest best = RowBest(a, r, sh.best_scratch);
  if (best.value == -INFINITY) {  // no finite logit: the CPU's fallback
    if (threadIdx.x == 0) a.out_tokens[r] = stats.fallback_token;
    return;
  }
  if (row.temperature == 0.0f) {
    if (threadIdx.x == 0) a.out_tokens[r] = best.index;
    return;
  }
  if (threadIdx.x == 0) {  // block sums in block order, as the CPU adds them
    double total = 0.0;
    const float* sums = a.ws.block_sums + int64_t{r} * a.num_sum_blocks;
    for (int32_t b = 0; b < a.num_sum_blocks; ++b) total = __dadd_rn(total, sums[b]);
    sh.total = total;
  }
  __syncthreads();
  DrawRow d;
  const int32_t begin = a.ws.segment_begin[r];
  d.keys = a.sorted_keys + begin;
  d.num_candidates = a.ws.segment_end[r] - begin;
  d.id_bits = a.id_bits;
  d.n = a.vocab;
  d.k = row.top_k > 0 && row.top_k < a.vocab ? row.top_k : a.vocab;
  d.kept0 = d.k;
  if (row.min_p > 0.0f) d.kept0 = min(d.kept0, max(1, stats.min_p_count));
  d.top_p = row.top_p;
  d.total = sh.total;
  d.u = CounterUniform(row.seed, static_cast<uint64_t>(row.output_index));

  const int32_t token = FastDraw(d, sh);
  if (threadIdx.x == 0) a.out_tokens[r] = token >= 0 ? token : ExactDraw(d);
}

}  // namespace

cudaError_t LaunchDraw(const SampleArgs& args, cudaStream_t stream) {
  DrawKernel<<<args.num_rows, kDrawThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace loom::cuda::sampling
