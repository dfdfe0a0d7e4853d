// Reference implementations of loom's element-wise, normalisation, position and attention ops.
//
// Obviously correct first: one scalar loop per formula, fp32 accumulation, no threads. Every
// optimised kernel (kernels/cpu, kernels/cuda) is tested against these. Shapes use named dims;
// "row" means one token.
#pragma once

#include <cstdint>

#include "kernels/common/attention_args.h"
#include "kernels/common/dtype.h"

namespace loom::ref {

// out[t, :] = table[token_ids[t], :] as f32.  table: [vocab, dim] of `table_dtype`, a float type
// or a block-quantized one (rows of DTypeRowBytes(table_dtype, dim) bytes, dequantized).
void Embedding(const int32_t* token_ids, int32_t num_tokens, const void* table, DType table_dtype,
               int32_t dim, float* out);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:]   (Hugging Face RMSNorm).
// x and out: [num_rows, dim] with row strides; out may alias x.
void RmsNorm(const float* x, int64_t x_stride, int32_t num_rows, int32_t dim, const void* weight,
             DType weight_dtype, float eps, float* out, int64_t out_stride);

// residual[r, :] += delta[r, :]; out[r, :] = RmsNorm(residual[r, :]).
void AddRmsNorm(float* residual, const float* delta, int32_t num_rows, int32_t dim,
                const void* weight, DType weight_dtype, float eps, float* out);

// Rotary position embedding in the "rotate half" layout of Hugging Face Llama checkpoints, in
// place on x: [num_tokens, num_heads, head_dim] with row stride x_stride. For each token t, head
// and i < rotary_dim / 2, with c = cos[t, i] and s = sin[t, i] (the angles of t's position):
//   x'[i]                = x[i] * c - x[i + rotary_dim / 2] * s
//   x'[i + rotary_dim/2] = x[i + rotary_dim / 2] * c + x[i] * s
// Dimensions past rotary_dim are left alone. cos, sin: [num_tokens, rotary_dim / 2].
void Rope(float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads, int32_t head_dim,
          int32_t rotary_dim, const float* cos, const float* sin);

// out[t, i] = silu(gate[t, i]) * up[t, i], silu(g) = g / (1 + exp(-g)). Row strides given.
void SiluMul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
             int32_t num_rows, int32_t dim, float* out, int64_t out_stride);

// In place on each of `num_rows` contiguous rows of `dim` floats (dim a power of two): x <-
// H x / sqrt(dim), H the Sylvester-Hadamard matrix (H[i][j] = (-1)^popcount(i & j)). The
// transform is orthogonal and its own inverse; rotating q and k leaves q . k unchanged, and
// rotating V and then the attention output leaves the output unchanged, while spreading a few
// large channels over all of them (what makes low-bit KV codes accurate; QuaRot).
void HadamardRotate(float* x, int64_t num_rows, int32_t dim);

// Stores K/V rows into the paged cache (see KvWriteArgs), rounding to the cache dtype.
void WriteKv(const KvWriteArgs& args);

// Causal (optionally sliding-window) attention of each query row over its sequence's cached
// keys, softmax in f32 (see PagedAttentionArgs). Keys and values must already be written.
void PagedAttention(const PagedAttentionArgs& args);

}  // namespace loom::ref
