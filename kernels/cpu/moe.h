// CPU kernels of the mixture-of-experts ops: routing, row gather, output init, weighted
// scatter-add and its token-by-token form (combine). Same contracts and results as kernels/ref/moe_ref.h (the same arithmetic in the same
// order), split across the pool's threads by token or row. These move a few bytes per flop next to
// the expert matmuls, so each is one pass over its rows.
#pragma once

#include <cstdint>

#include "kernels/common/moe_args.h"
#include "kernels/cpu/thread_pool.h"

namespace loom::cpu {

// Routes every token (in parallel), then groups the pairs by expert (one pass, in order).
void MoeRoute(ThreadPool& pool, const MoeRouteArgs& args);

void GatherRows(ThreadPool& pool, const float* x, int64_t x_stride, const int32_t* rows,
                int32_t num_rows, int32_t dim, float* out);

void MoeInitOutput(ThreadPool& pool, const float* shared, const float* gate_logits,
                   int32_t num_tokens, int32_t dim, float* out);

// Rows go to distinct tokens, so threads split the rows without conflicts.
void MoeScatterAdd(ThreadPool& pool, const float* rows, int32_t num_rows, int32_t dim,
                   const int32_t* tokens, const float* weights, float* out);

// Tokens go to threads; each adds its rows in ascending order (kernels/ref/moe_ref.h).
void MoeCombine(ThreadPool& pool, const float* rows, int32_t num_tokens, int32_t top_k,
                int32_t dim, const int32_t* token_rows, const float* weights, float* out);

}  // namespace loom::cpu
