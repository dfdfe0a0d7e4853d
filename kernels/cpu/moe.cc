#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ref/moe_ref.h"

namespace loom::cpu {
namespace {

// Below this many floats of work a call stays on the calling thread.
constexpr int64_t kMinParallelFloats = 16384;

// Runs fn(begin, end) over [0, num_items), on the pool when the work pays for the hand-off.
template <typename Fn>
void ForRows(ThreadPool& pool, int64_t num_items, int64_t floats_per_item, const Fn& fn) {
  if (num_items * floats_per_item < kMinParallelFloats || pool.num_threads() == 1) {
    fn(0, num_items);
    return;
  }
  pool.ParallelFor(num_items, [&](int64_t begin, int64_t end, int) { fn(begin, end); });
}

// dst += w * src over dim floats: the one weighted add of MoeScatterAdd and MoeCombine.
inline void AddWeightedRow(float* __restrict dst, const float* __restrict src, float w,
                           int32_t dim) {
  for (int32_t i = 0; i < dim; ++i) dst[i] += w * src[i];
}

}  // namespace

void MoeRoute(ThreadPool& pool, const MoeRouteArgs& a) {
  ForRows(pool, a.num_tokens, a.num_experts * 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      ref::MoeRouteToken(a.logits + t * a.logits_stride, a.num_experts, a.top_k, a.renormalize,
                         a.expert_ids + t * a.top_k, a.expert_weights + t * a.top_k);
    }
  });
  ref::MoeGroup(a);
}

void GatherRows(ThreadPool& pool, const float* x, int64_t x_stride, const int32_t* rows,
                int32_t num_rows, int32_t dim, float* out) {
  ForRows(pool, num_rows, dim, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::memcpy(out + r * dim, x + rows[r] * x_stride, sizeof(float) * static_cast<size_t>(dim));
    }
  });
}

void MoeInitOutput(ThreadPool& pool, const float* shared, const float* gate_logits,
                   int32_t num_tokens, int32_t dim, float* out) {
  ForRows(pool, num_tokens, dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = out + t * dim;
      if (shared == nullptr) {
        std::fill(row, row + dim, 0.0f);
        continue;
      }
      const float gate = 1.0f / (1.0f + std::exp(-gate_logits[t]));
      const float* in = shared + t * dim;
      for (int32_t i = 0; i < dim; ++i) row[i] = gate * in[i];
    }
  });
}

void MoeScatterAdd(ThreadPool& pool, const float* rows, int32_t num_rows, int32_t dim,
                   const int32_t* tokens, const float* weights, float* out) {
  ForRows(pool, num_rows, dim, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      AddWeightedRow(out + int64_t{tokens[r]} * dim, rows + r * dim, weights[r], dim);
    }
  });
}

void MoeCombine(ThreadPool& pool, const float* rows, int32_t num_tokens, int32_t top_k,
                int32_t dim, const int32_t* token_rows, const float* weights, float* out) {
  ForRows(pool, num_tokens, int64_t{dim} * top_k, [&](int64_t begin, int64_t end) {
    int32_t sorted[kMaxMoeExperts];
    for (int64_t t = begin; t < end; ++t) {
      ref::SortedTokenRows(token_rows + t * top_k, top_k, sorted);
      for (int32_t k = 0; k < top_k; ++k) {
        AddWeightedRow(out + t * dim, rows + int64_t{sorted[k]} * dim, weights[sorted[k]], dim);
      }
    }
  });
}

}  // namespace loom::cpu
