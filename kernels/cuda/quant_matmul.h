// CUDA kernels for block-quantized weights (DType kQ8_0, kQ4_0, kQ4_1, kQ4_K, kQ5_K, kQ6_K; block
// layouts in kernels/ref/quant_ref.h): the decode-sized matmul, and dequantization of whole rows
// (for the embedding lookup and for the tiles the larger matmuls hand to cuBLAS).
//
//   QuantGemv:      y[r, o] = sum_i x[r, i] * W[o, i] (+ bias[o])   r < num_rows <= 8
//                   x: [num_rows, in_features] f32, row stride x_stride
//                   W: [out_features, in_features] in dtype, DTypeRowBytes(dtype, in) per row
//                   y: [num_rows, out_features] f32, row stride y_stride
//   DequantizeRows: out[t, c] = W[first_row + t, c]                t < num_rows, c < cols
//   QuantEmbedding: out[t, c] = W[token_ids[t], c]                 t < num_tokens, c < dim
//                   out: contiguous rows of f32 (DequantizeRows also bf16)
//
// QuantGemv work split. A block of 4 warps (8 when num_rows > 2) owns 2 output features per warp.
// The reduction dimension is walked in chunks of as many 32-element groups as 48 KiB of shared
// memory holds for num_rows rows of x (a multiple of 32 groups: 10240 elements for one row, 1024
// for eight): the block stages x[:, chunk] in shared memory (f32, each group padded to 36 floats
// so the float4 reads of a quarter-warp hit distinct banks), then lane l of a warp takes groups
// l, l + 32, ... of the chunk for both of its output features: it loads a group's bytes with the
// widest loads the format's alignment allows, dequantizes them in registers and accumulates
// their dot product with every x row in f32. A warp-shuffle sum ends each output. Each weight
// byte is read once; x is read from L2 once per block. Bytes moved: out_features *
// DTypeRowBytes(dtype, in_features) + num_rows * (in_features + out_features) * 4 (+ the bias).
//
// Dequantization work split: one thread per output element (grid-stride), so loads of the
// quantized bytes and stores of the outputs are both coalesced. The values are computed in f32 in
// the order ref::DequantizeRow computes them and without fused multiply-adds, so the f32 output
// is bit-identical to the reference and the bf16 output is its round-to-nearest-even.
//
// Alignment: the weight base pointer must be aligned to QuantWeightAlignment(dtype) bytes (every
// row then is too); device allocations are 256-byte aligned. x, y and out need only f32/bf16
// alignment.
//
// Plain C++ header: the launchers take device pointers and a stream, queue the kernels and return
// the launch error; they never allocate or synchronise, so they can be captured in a CUDA graph.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/dtype.h"

namespace loom::cuda {

// The most x rows one QuantGemv call takes; larger batches dequantize tiles for a GEMM.
inline constexpr int32_t kQuantGemvMaxRows = 8;

// The alignment in bytes QuantGemv requires of a weight of `dtype` (16 for q4_k and q5_k, whose
// blocks are 16-byte multiples; 4 for q4_1; 2 for the rest); 0 for a non-quantized dtype.
int32_t QuantWeightAlignment(DType dtype);

// Returns cudaErrorInvalidValue for a dtype that is not block-quantized, negative sizes,
// num_rows > kQuantGemvMaxRows, an in_features that is not whole blocks, x_stride < in_features,
// y_stride < out_features (when num_rows > 1), or a misaligned weight; cudaSuccess without a
// launch when num_rows or out_features is 0. bias may be null.
cudaError_t QuantGemv(const float* x, int64_t x_stride, int32_t num_rows, const void* weight,
                      DType dtype, int32_t out_features, int32_t in_features, const float* bias,
                      float* y, int64_t y_stride, cudaStream_t stream);

// The grouped form (a mixture-of-experts layer's experts in one launch): rows [group_offsets[g],
// group_offsets[g + 1]) of x and y go through weights[g] ([out_features, in_features] in dtype,
// each aligned as above), for g < num_groups. The offsets and the weight pointers are read on the
// device, so the launch does not depend on them; at most max_group_rows rows per group are
// computed (blocks of kQuantGemvMaxRows rows of one group; a block past its group's rows
// returns at once). Returns cudaErrorInvalidValue as QuantGemv does, for num_groups above 65535,
// or y_stride < out_features; no bias.
cudaError_t QuantGemvGrouped(const float* x, int64_t x_stride, const int32_t* group_offsets,
                             int32_t num_groups, int32_t max_group_rows,
                             const void* const* weights, DType dtype, int32_t out_features,
                             int32_t in_features, float* y, int64_t y_stride,
                             cudaStream_t stream);

// Rows [first_row, first_row + num_rows) of the quantized matrix `weight` ([*, cols] in dtype),
// dequantized into `out` as out_dtype (kF32 or kBF16), rows contiguous. Returns
// cudaErrorInvalidValue for a non-quantized dtype, another out_dtype, negative sizes or cols
// that are not whole blocks.
cudaError_t DequantizeRows(const void* weight, DType dtype, int64_t first_row, int32_t num_rows,
                           int32_t cols, DType out_dtype, void* out, cudaStream_t stream);

// The embedding lookup of a quantized table [vocab, dim]. token_ids are validated by the caller
// (each in [0, vocab); not checked here). Returns cudaErrorInvalidValue as DequantizeRows does.
cudaError_t QuantEmbedding(const int32_t* token_ids, int32_t num_tokens, const void* table,
                           DType dtype, int32_t dim, float* out, cudaStream_t stream);

}  // namespace loom::cuda
