#include "kernels/cuda/paged_attention.h"

#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/kv_format_inl.cuh"
#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxPerLane = 8;  // head_dim <= 32 * 8
constexpr int kMaxHeadDim = 32 * kMaxPerLane;

__device__ __forceinline__ float WarpSum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// The sequence that owns query row t: the last s with query_start[s] <= t.
__device__ __forceinline__ int SequenceOf(const int32_t* query_start, int num_seqs, int t) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Row access of the element formats (C: float, bf16, f16): direct loads.
template <typename C>
struct ElementRows {
  const C* k;
  const C* v;
  int64_t head_stride, block_stride;
  int32_t block_size, head_dim;

  struct Row {
    const C* ptr;
    __device__ __forceinline__ float operator[](int d) const { return internal::ToF32(ptr[d]); }
  };
  __device__ __forceinline__ Row At(const int32_t* blocks, int kv_head, int pos, bool is_v) const {
    const int64_t base = static_cast<int64_t>(blocks[pos / block_size]) * block_stride +
                         static_cast<int64_t>(kv_head) * head_stride +
                         static_cast<int64_t>(pos % block_size) * head_dim;
    return {(is_v ? v : k) + base};
  }
};

// Row access of fp8 and the low-bit formats: a full block's row dequantized from its packed form,
// the newest blocks' from the sequence's tail (kv_format_inl.cuh; the rules of
// ref::LoadKvElement).
struct AnyFormatRows {
  PagedKvView cache;
  internal::KvGeometry geo;
  int32_t seq_len, tail_slot, tail_first_block;

  struct Row {
    internal::KvRowRef ref;
    DType dtype;
    int32_t bits;
    __device__ __forceinline__ float operator[](int d) const {
      return internal::KvLoadElement(ref, dtype, bits, d);
    }
  };
  __device__ __forceinline__ Row At(const int32_t* blocks, int kv_head, int pos, bool is_v) const {
    return {internal::KvRowOf(cache, geo, blocks, seq_len, tail_slot, tail_first_block, is_v, pos,
                              kv_head),
            cache.dtype, geo.bits};
  }
};

// One (query row, head); Rows reads the cache (ElementRows<C> or AnyFormatRows).
template <typename Rows>
__device__ __forceinline__ void AttendRow(const PagedAttentionArgs& args, const Rows& rows,
                                          int t, int h, int s, const int32_t* blocks) {
  __shared__ float warp_max[kWarps];
  __shared__ float warp_sum[kWarps];
  __shared__ float warp_acc[kWarps][kMaxHeadDim];
  const PagedKvView& cache = args.cache;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int head_dim = cache.head_dim;
  const int pos = args.seq_lens[s] - (args.query_start[s + 1] - t);
  const int first = args.sliding_window > 0 ? max(0, pos - args.sliding_window + 1) : 0;
  const int kv_head = h / (args.num_heads / cache.num_kv_heads);

  // This lane's part of q (pre-scaled) and of the accumulator: elements lane + 32 * i.
  const float* q = args.q + static_cast<int64_t>(t) * args.q_stride + static_cast<int64_t>(h) * head_dim;
  float qv[kMaxPerLane];
  float acc[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < head_dim ? q[d] * args.scale : 0.0f;
    acc[i] = 0.0f;
  }
  float running_max = -INFINITY;
  float running_sum = 0.0f;
  for (int j = first + warp; j <= pos; j += kWarps) {
    const auto k_row = rows.At(blocks, kv_head, j, false);
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) dot += qv[i] * k_row[d];
    }
    dot = WarpSum(dot);
    const float new_max = fmaxf(running_max, dot);
    const float correction = expf(running_max - new_max);  // 0 on the first key
    const float p = expf(dot - new_max);
    running_sum = running_sum * correction + p;
    const auto v_row = rows.At(blocks, kv_head, j, true);
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) acc[i] = acc[i] * correction + p * v_row[d];
    }
    running_max = new_max;
  }
  if (lane == 0) {
    warp_max[warp] = running_max;
    warp_sum[warp] = running_sum;
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < head_dim) warp_acc[warp][d] = acc[i];
  }
  __syncthreads();
  // Combine the warps: rescale each to the global maximum (a warp that saw no key has max -inf
  // and contributes nothing; the key at `pos` is always seen, so the sum is positive).
  float global_max = -INFINITY;
  for (int w = 0; w < kWarps; ++w) global_max = fmaxf(global_max, warp_max[w]);
  float weight[kWarps];
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = warp_max[w] == -INFINITY ? 0.0f : expf(warp_max[w] - global_max);
    total += warp_sum[w] * weight[w];
  }
  float* out = args.out + static_cast<int64_t>(t) * args.out_stride + static_cast<int64_t>(h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += kThreads) {
    float value = 0.0f;
    for (int w = 0; w < kWarps; ++w) value += warp_acc[w][d] * weight[w];
    out[d] = value / total;
  }
}

// The sequence of query row blockIdx.x, or -1 when `skip_decode` and it has one query row.
__device__ __forceinline__ int RowSequence(const PagedAttentionArgs& args, bool skip_decode) {
  const int s = SequenceOf(args.query_start, args.num_seqs, blockIdx.x);
  if (skip_decode && args.query_start[s + 1] - args.query_start[s] == 1) return -1;
  return s;
}

template <typename C>
__global__ void __launch_bounds__(kThreads)
    PagedAttentionKernel(PagedAttentionArgs args, bool skip_decode) {
  const int s = RowSequence(args, skip_decode);
  if (s < 0) return;
  const PagedKvView& cache = args.cache;
  // PagedKvView's stride helpers are host functions: the same products, spelled out.
  const int64_t head_stride = static_cast<int64_t>(cache.block_size) * cache.head_dim;
  const ElementRows<C> rows{static_cast<const C*>(cache.k), static_cast<const C*>(cache.v),
                            head_stride, head_stride * cache.num_kv_heads, cache.block_size,
                            cache.head_dim};
  AttendRow(args, rows, blockIdx.x, blockIdx.y, s,
            args.block_tables + static_cast<int64_t>(s) * args.max_blocks_per_seq);
}

__global__ void __launch_bounds__(kThreads)
    PagedAttentionAnyFormatKernel(PagedAttentionArgs args, internal::KvGeometry geo,
                                  bool skip_decode) {
  const int s = RowSequence(args, skip_decode);
  if (s < 0) return;
  const int32_t tail_slot = args.tail_slots != nullptr ? args.tail_slots[s] : -1;
  const int32_t tail_first = args.tail_first_blocks != nullptr ? args.tail_first_blocks[s] : 0;
  const AnyFormatRows rows{args.cache, geo, args.seq_lens[s], tail_slot, tail_first};
  AttendRow(args, rows, blockIdx.x, blockIdx.y, s,
            args.block_tables + static_cast<int64_t>(s) * args.max_blocks_per_seq);
}

}  // namespace

bool PagedAttentionSupports(const PagedKvView& cache) {
  if (cache.head_dim < 1 || cache.head_dim > kMaxHeadDim || cache.block_size < 1) return false;
  if (IsFloatDType(cache.dtype) || cache.dtype == DType::kF8E4M3) return true;
  return cache.low_bit() && cache.head_dim % kKvPackChunk == 0 &&
         cache.code_order == KvCodeOrder::kRows;
}

cudaError_t PagedAttention(const PagedAttentionArgs& args, int32_t num_tokens,
                           cudaStream_t stream, PagedAttentionRows rows) {
  const PagedKvView& cache = args.cache;
  if (num_tokens < 0 || args.num_seqs < 0 || args.num_heads < 0 || cache.num_kv_heads < 1 ||
      args.num_heads % cache.num_kv_heads != 0 || !PagedAttentionSupports(cache) ||
      args.max_blocks_per_seq < 0) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0 || args.num_heads == 0 || args.num_seqs == 0) return cudaSuccess;
  if (args.num_heads > 65535) return cudaErrorInvalidValue;  // grid.y limit
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(args.num_heads));
  const bool skip_decode = rows == PagedAttentionRows::kSkipDecode;
  if (!IsFloatDType(cache.dtype)) {
    PagedAttentionAnyFormatKernel<<<grid, kThreads, 0, stream>>>(
        args, internal::KvGeometryOf(cache), skip_decode);
    return cudaGetLastError();
  }
  return internal::DispatchFloatType(cache.dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    PagedAttentionKernel<C><<<grid, kThreads, 0, stream>>>(args, skip_decode);
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda
