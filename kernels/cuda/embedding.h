// CUDA embedding lookup: token ids to f32 rows of the embedding table.
//
//   out[t, :] = f32(table[token_ids[t], :])      t < num_tokens
//   token_ids: [num_tokens] i32, each in [0, vocab) (validated by the caller; not checked here)
//   table:     [vocab, dim] of table_dtype (f32, bf16 or f16), rows contiguous
//   out:       [num_tokens, dim] f32, rows contiguous
//
// Work split: one block per token row (blocks loop over rows past 65536); its threads walk the
// row in vectors of N elements, N the widest of 8/4/2/1 that dim and both pointers' alignment
// allow (8 bf16/f16 = one 16-byte load and two 16-byte stores). The bf16/f16 -> f32 conversion is
// exact, so the result is bit-identical to ref::Embedding.
// Bytes moved: num_tokens * dim * (sizeof(table_dtype) + 4), plus 4 bytes per token id.
//
// Plain C++ header: the launcher takes device pointers and a stream, queues the kernel and
// returns the launch error; it never allocates or synchronises.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/dtype.h"

namespace loom::cuda {

// Returns cudaErrorInvalidValue for negative sizes or a non-float table dtype; cudaSuccess
// without a launch when there is nothing to do.
cudaError_t Embedding(const int32_t* token_ids, int32_t num_tokens, const void* table,
                      DType table_dtype, int32_t dim, float* out, cudaStream_t stream);

}  // namespace loom::cuda
