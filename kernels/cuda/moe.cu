// Row movement of the mixture-of-experts block; the contract is in moe.h.
#include "kernels/cuda/moe.h"

#include <cmath>

#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

using internal::LoadF32;
using internal::StoreF32;

constexpr int kMaxThreads = 256;
constexpr int kMaxVec = 4;

template <int kVec>
__global__ void GatherRowsKernel(const float* x, int64_t x_stride, const int32_t* rows,
                                 int32_t num_rows, int32_t dim, float* out) {
  const int32_t num_vecs = dim / kVec;
  for (int64_t r = blockIdx.x; r < num_rows; r += gridDim.x) {
    const float* src = x + int64_t{rows[r]} * x_stride;
    float* dst = out + r * dim;
    for (int32_t j = threadIdx.x; j < num_vecs; j += blockDim.x) {
      float v[kVec];
      LoadF32(src + int64_t{j} * kVec, v);
      StoreF32(dst + int64_t{j} * kVec, v);
    }
  }
}

template <int kVec>
__global__ void MoeInitOutputKernel(const float* shared, const float* gate_logits,
                                    int32_t num_tokens, int32_t dim, float* out) {
  const int32_t num_vecs = dim / kVec;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    float gate = 0.0f;
    if (shared != nullptr) gate = 1.0f / (1.0f + expf(-gate_logits[t]));
    for (int32_t j = threadIdx.x; j < num_vecs; j += blockDim.x) {
      const int64_t col = t * dim + int64_t{j} * kVec;
      float v[kVec];
      if (shared != nullptr) {
        LoadF32(shared + col, v);
#pragma unroll
        for (int i = 0; i < kVec; ++i) v[i] = gate * v[i];
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) v[i] = 0.0f;
      }
      StoreF32(out + col, v);
    }
  }
}

template <int kVec>
__global__ void MoeScatterAddKernel(const float* rows, int32_t num_rows, int32_t dim,
                                    const int32_t* tokens, const float* weights, float* out) {
  const int32_t num_vecs = dim / kVec;
  for (int64_t r = blockIdx.x; r < num_rows; r += gridDim.x) {
    const float* src = rows + r * dim;
    float* dst = out + int64_t{tokens[r]} * dim;
    const float w = weights[r];
    for (int32_t j = threadIdx.x; j < num_vecs; j += blockDim.x) {
      const int64_t col = int64_t{j} * kVec;
      float s[kVec], d[kVec];
      LoadF32(src + col, s);
      LoadF32(dst + col, d);
#pragma unroll
      for (int i = 0; i < kVec; ++i) d[i] = fmaf(w, s[i], d[i]);
      StoreF32(dst + col, d);
    }
  }
}

// ---- Routing on the device ----

constexpr int kRouteWarps = 4;  // tokens per block of the routing kernel
constexpr int kGroupThreads = 256;

// torch.topk's order: NaN first, then the larger probability; equal ones by the lower expert.
__device__ __forceinline__ bool Better(float p, int32_t e, float q, int32_t f) {
  const bool p_nan = isnan(p), q_nan = isnan(q);
  if (p_nan != q_nan) return p_nan;
  if (!p_nan && p != q) return p > q;
  return e < f;
}

// One warp per token: the softmax's max and sum over the warp, then top_k rounds, each taking the
// best (probability, expert) strictly after the previous round's pick.
__global__ void __launch_bounds__(kRouteWarps * 32)
    MoeRouteKernel(const float* logits, int64_t stride, int32_t num_tokens, int32_t num_experts,
                   int32_t top_k, bool renormalize, int32_t* ids, float* weights) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t t = int64_t{blockIdx.x} * kRouteWarps + (threadIdx.x >> 5);
  if (t >= num_tokens) return;  // the whole warp
  const float* l = logits + t * stride;
  float max_logit = -INFINITY;
  for (int32_t e = lane; e < num_experts; e += 32) max_logit = fmaxf(max_logit, l[e]);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    max_logit = fmaxf(max_logit, __shfl_xor_sync(0xffffffffu, max_logit, offset));
  }
  float sum = 0.0f;
  for (int32_t e = lane; e < num_experts; e += 32) sum += expf(l[e] - max_logit);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  }
  const float inv_sum = 1.0f / sum;
  float prev_p = NAN;
  int32_t prev_e = -1;  // before every expert: a NaN at index -1 is better than all
  float total = 0.0f;
  for (int32_t k = 0; k < top_k; ++k) {
    float best_p = 0.0f;
    int32_t best_e = -1;
    for (int32_t e = lane; e < num_experts; e += 32) {
      const float p = expf(l[e] - max_logit) * inv_sum;
      if (!Better(prev_p, prev_e, p, e)) continue;  // taken in an earlier round
      if (best_e < 0 || Better(p, e, best_p, best_e)) {
        best_p = p;
        best_e = e;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other_p = __shfl_xor_sync(0xffffffffu, best_p, offset);
      const int32_t other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
      if (other_e >= 0 && (best_e < 0 || Better(other_p, other_e, best_p, best_e))) {
        best_p = other_p;
        best_e = other_e;
      }
    }
    if (lane == 0) {
      ids[t * top_k + k] = best_e;
      weights[t * top_k + k] = best_p;
    }
    total += best_p;
    prev_p = best_p;
    prev_e = best_e;
  }
  if (renormalize && lane == 0) {
    for (int32_t k = 0; k < top_k; ++k) weights[t * top_k + k] /= total;
  }
}

// One block: per expert (a thread each), its count, then (after a scan) its rows in token order.
__global__ void __launch_bounds__(kGroupThreads)
    MoeGroupKernel(const int32_t* ids, const float* weights, int32_t num_pairs, int32_t top_k,
                   int32_t num_experts, int32_t* offsets, int32_t* grouped_tokens,
                   float* grouped_weights, int32_t* token_rows) {
  extern __shared__ int32_t starts[];  // [num_experts + 1]
  for (int32_t e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int32_t count = 0;
    for (int32_t i = 0; i < num_pairs; ++i) count += ids[i] == e;
    starts[e] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int32_t e = 0; e < num_experts; ++e) {
      const int32_t count = starts[e];
      starts[e] = run;
      run += count;
    }
    starts[num_experts] = run;
  }
  __syncthreads();
  for (int32_t e = threadIdx.x; e <= num_experts; e += blockDim.x) offsets[e] = starts[e];
  for (int32_t e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int32_t row = starts[e];
    for (int32_t i = 0; i < num_pairs; ++i) {
      if (ids[i] != e) continue;
      grouped_tokens[row] = i / top_k;
      grouped_weights[row] = weights[i];
      if (token_rows != nullptr) token_rows[i] = row;
      ++row;
    }
  }
}

// One block per token: its grouped rows sorted (thread 0, insertion sort), then every element's
// sum in that order, one fused multiply-add per row as MoeScatterAddKernel makes it.
template <int kVec>
__global__ void MoeCombineKernel(const float* rows, int32_t num_tokens, int32_t top_k,
                                 int32_t dim, const int32_t* token_rows, const float* weights,
                                 float* out) {
  extern __shared__ int32_t sorted[];  // [top_k]
  const int32_t num_vecs = dim / kVec;
  for (int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    __syncthreads();  // the previous token's rows are read
    if (threadIdx.x == 0) {
      for (int32_t k = 0; k < top_k; ++k) {
        const int32_t r = token_rows[t * top_k + k];
        int32_t j = k;
        for (; j > 0 && sorted[j - 1] > r; --j) sorted[j] = sorted[j - 1];
        sorted[j] = r;
      }
    }
    __syncthreads();
    float* dst = out + t * dim;
    for (int32_t j = threadIdx.x; j < num_vecs; j += blockDim.x) {
      const int64_t col = int64_t{j} * kVec;
      float d[kVec];
      LoadF32(dst + col, d);
      for (int32_t k = 0; k < top_k; ++k) {
        const int32_t r = sorted[k];
        const float w = weights[r];
        float s[kVec];
        LoadF32(rows + int64_t{r} * dim + col, s);
#pragma unroll
        for (int i = 0; i < kVec; ++i) d[i] = fmaf(w, s[i], d[i]);
      }
      StoreF32(dst + col, d);
    }
  }
}

}  // namespace

cudaError_t MoeRoute(const MoeRouteArgs& a, cudaStream_t stream) {
  if (a.num_tokens < 0 || a.num_experts < 1 || a.num_experts > kMaxMoeExperts || a.top_k < 1 ||
      a.top_k > a.num_experts || a.logits_stride < a.num_experts) {
    return cudaErrorInvalidValue;
  }
  const int64_t pairs = int64_t{a.num_tokens} * a.top_k;
  if (pairs > INT32_MAX) return cudaErrorInvalidValue;
  if (a.num_tokens > 0) {
    const unsigned blocks = static_cast<unsigned>((a.num_tokens + kRouteWarps - 1) / kRouteWarps);
    MoeRouteKernel<<<blocks, kRouteWarps * 32, 0, stream>>>(
        a.logits, a.logits_stride, a.num_tokens, a.num_experts, a.top_k, a.renormalize,
        a.expert_ids, a.expert_weights);
    const cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess) return launched;
  }
  const size_t smem = sizeof(int32_t) * (static_cast<size_t>(a.num_experts) + 1);
  MoeGroupKernel<<<1, kGroupThreads, smem, stream>>>(
      a.expert_ids, a.expert_weights, static_cast<int32_t>(pairs), a.top_k, a.num_experts,
      a.expert_offsets, a.grouped_tokens, a.grouped_weights, a.token_rows);
  return cudaGetLastError();
}

cudaError_t MoeCombine(const float* rows, int32_t num_tokens, int32_t top_k, int32_t dim,
                       const int32_t* token_rows, const float* weights, float* out,
                       cudaStream_t stream) {
  if (num_tokens < 0 || dim < 0 || top_k < 1 || top_k > kMaxMoeExperts) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0 || dim == 0) return cudaSuccess;
  const int vec = internal::PickVecWidth(kMaxVec, {dim},
                                         {{rows, sizeof(float)}, {out, sizeof(float)}});
  const size_t smem = sizeof(int32_t) * static_cast<size_t>(top_k);
  return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
    constexpr int kVec = decltype(vec_tag)::value;
    const int threads = internal::ThreadsForItems(dim / kVec, kMaxThreads);
    MoeCombineKernel<kVec><<<internal::GridForRows(num_tokens), threads, smem, stream>>>(
        rows, num_tokens, top_k, dim, token_rows, weights, out);
    return cudaGetLastError();
  });
}

cudaError_t GatherRows(const float* x, int64_t x_stride, const int32_t* rows, int32_t num_rows,
                       int32_t dim, float* out, cudaStream_t stream) {
  if (num_rows < 0 || dim < 0 || x_stride < 0) return cudaErrorInvalidValue;
  if (num_rows == 0 || dim == 0) return cudaSuccess;
  const int vec = internal::PickVecWidth(kMaxVec, {dim, x_stride},
                                         {{x, sizeof(float)}, {out, sizeof(float)}});
  return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
    constexpr int kVec = decltype(vec_tag)::value;
    const int threads = internal::ThreadsForItems(dim / kVec, kMaxThreads);
    GatherRowsKernel<kVec><<<internal::GridForRows(num_rows), threads, 0, stream>>>(
        x, x_stride, rows, num_rows, dim, out);
    return cudaGetLastError();
  });
}

cudaError_t MoeInitOutput(const float* shared, const float* gate_logits, int32_t num_tokens,
                          int32_t dim, float* out, cudaStream_t stream) {
  if (num_tokens < 0 || dim < 0) return cudaErrorInvalidValue;
  if ((shared == nullptr) != (gate_logits == nullptr)) return cudaErrorInvalidValue;
  if (num_tokens == 0 || dim == 0) return cudaSuccess;
  const int vec = internal::PickVecWidth(kMaxVec, {dim},
                                         {{shared, sizeof(float)}, {out, sizeof(float)}});
  return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
    constexpr int kVec = decltype(vec_tag)::value;
    const int threads = internal::ThreadsForItems(dim / kVec, kMaxThreads);
    MoeInitOutputKernel<kVec><<<internal::GridForRows(num_tokens), threads, 0, stream>>>(
        shared, gate_logits, num_tokens, dim, out);
    return cudaGetLastError();
  });
}

cudaError_t MoeScatterAdd(const float* rows, int32_t num_rows, int32_t dim, const int32_t* tokens,
                          const float* weights, float* out, cudaStream_t stream) {
  if (num_rows < 0 || dim < 0) return cudaErrorInvalidValue;
  if (num_rows == 0 || dim == 0) return cudaSuccess;
  const int vec = internal::PickVecWidth(kMaxVec, {dim},
                                         {{rows, sizeof(float)}, {out, sizeof(float)}});
  return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
    constexpr int kVec = decltype(vec_tag)::value;
    const int threads = internal::ThreadsForItems(dim / kVec, kMaxThreads);
    MoeScatterAddKernel<kVec><<<internal::GridForRows(num_rows), threads, 0, stream>>>(
        rows, num_rows, dim, tokens, weights, out);
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda
