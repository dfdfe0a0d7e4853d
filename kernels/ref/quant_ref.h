// Reference (de)quantization of the block-quantized weight formats (DType kQ8_0 ... kQ6_K), which
// are bit-compatible with GGUF/ggml's types of the same names. Plain scalar code, one element at a
// time: the optimised kernels (kernels/cpu, kernels/cuda) are tested against DequantizeRow.
//
// A row of `n` elements is n / block_elems blocks stored back to back (n a multiple of
// block_elems, see RowFitsBlocks). Block layouts, all little-endian, `half` an IEEE f16:
//
//   q8_0  32 elems, 34 B: half d; int8 q[32].                    x[i] = d * q[i]
//   q4_0  32 elems, 18 B: half d; u8 qs[16].                     x[i] = d * (nib(i) - 8)
//   q4_1  32 elems, 20 B: half d, m; u8 qs[16].                  x[i] = d * nib(i) + m
//         nib(i) for i < 16 is qs[i] & 15, for i >= 16 is qs[i - 16] >> 4.
//   q4_k 256 elems, 144 B: half d, dmin; u8 scales[12]; u8 qs[128].
//         Eight sub-blocks of 32 with a 6-bit scale sc[j] and a 6-bit min mn[j] packed in
//         `scales` (ScaleMinK4). Sub-blocks 2c and 2c+1 share qs[32c .. 32c+31]: low nibbles are
//         sub-block 2c, high nibbles 2c+1.  x = d * sc[j] * q - dmin * mn[j].
//   q5_k 256 elems, 176 B: half d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128].
//         As q4_k, plus a fifth bit: element l of sub-block j takes bit j of qh[l] as its 16s.
//   q6_k 256 elems, 210 B: u8 ql[128]; u8 qh[64]; int8 scales[16]; half d.
//         Two halves of 128; in half h (ql += 64h, qh += 32h, scales += 8h) element
//         32*g + l (g < 4, l < 32) is q = (low 4 bits) | (2 bits of qh[l] at 2g) << 4, minus 32,
//         with the low 4 bits ql[l + 32*(g&1)] >> (4*(g>>1)), and scale scales[g*2 + l/16].
//         x = d * scale * q.
//
// The products are computed in f32 in the order written above (d * sc first), as ggml does.
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"

namespace loom::ref {

// The 6-bit scale and min of sub-block j (< 8) of a q4_k / q5_k block's 12 packed scale bytes.
void ScaleMinK4(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min);

// out[0, n) = the n elements coded by the row at `row` in `dtype` (a quantized format, or f32 /
// f16 / bf16, which are widened). n must fit whole blocks.
void DequantizeRow(DType dtype, const void* row, int64_t n, float* out);

// Codes x[0, n) as one row of `dtype` at `row` (DTypeRowBytes(dtype, n) bytes). Simple
// round-to-nearest quantizers, not the error-minimising searches of llama.cpp: for making test
// and benchmark data, whose only requirement is to be valid blocks. n must fit whole blocks.
void QuantizeRow(DType dtype, const float* x, int64_t n, void* row);

}  // namespace loom::ref
