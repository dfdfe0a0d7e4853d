// CPU kernels for the element-wise, normalisation and positional ops of a decoder layer, and for
// writing K/V into the paged cache. Same contracts as kernels/ref/ops_ref.h (which states the
// math), plus a thread pool. These ops move a few bytes per flop, so each is one pass over its
// rows, split across threads by rows once there are enough of them to pay for the hand-off.
// Vector code is AVX2 (the baseline); below AVX2 the reference runs.
#pragma once

#include <cstdint>

#include "kernels/common/attention_args.h"
#include "kernels/common/dtype.h"
#include "kernels/cpu/thread_pool.h"

namespace loom::cpu {

// out[t, :] = table[token_ids[t], :] as f32. A block-quantized table (kQ8_0 ... kQ6_K, rows of
// DTypeRowBytes(table_dtype, dim) bytes) has each looked-up row dequantized (ref::DequantizeRow).
void Embedding(ThreadPool& pool, const int32_t* token_ids, int32_t num_tokens, const void* table,
               DType table_dtype, int32_t dim, float* out);

void RmsNorm(ThreadPool& pool, const float* x, int64_t x_stride, int32_t num_rows, int32_t dim,
             const void* weight, DType weight_dtype, float eps, float* out, int64_t out_stride);

void AddRmsNorm(ThreadPool& pool, float* residual, const float* delta, int32_t num_rows,
                int32_t dim, const void* weight, DType weight_dtype, float eps, float* out);

// residual[i] += delta[i].
void Add(ThreadPool& pool, float* residual, const float* delta, int64_t num_elements);

void Rope(ThreadPool& pool, float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads,
          int32_t head_dim, int32_t rotary_dim, const float* cos, const float* sin);

void SiluMul(ThreadPool& pool, const float* gate, int64_t gate_stride, const float* up,
             int64_t up_stride, int32_t num_rows, int32_t dim, float* out, int64_t out_stride);

void WriteKv(ThreadPool& pool, const KvWriteArgs& args);

// In place on `num_rows` contiguous rows of `dim` floats (a power of two): the butterfly form
// of ref::HadamardRotate (log2(dim) passes of sums and differences, then the 1/sqrt(dim) scale).
void HadamardRotate(ThreadPool& pool, float* x, int64_t num_rows, int32_t dim);

// Row-level implementations for AVX2 (elementwise_avx2.cc); called by the functions above.
namespace avx2 {
void RmsNormRow(const float* x, int32_t dim, const void* weight, DType weight_dtype, float eps,
                float* out);
void AddRow(float* residual, const float* delta, int64_t n);
void RopeRow(float* x, int32_t num_heads, int32_t head_dim, int32_t rotary_dim, const float* cos,
             const float* sin);
void SiluMulRow(const float* gate, const float* up, int32_t dim, float* out);
// Converts n f32 values to `dtype` (f32 copy, bf16 or f16 round to nearest even).
void ConvertRow(const float* in, int32_t n, DType dtype, void* out);
// Converts n values of `dtype` to f32.
void LoadRow(const void* in, DType dtype, int32_t n, float* out);
}  // namespace avx2

}  // namespace loom::cpu
