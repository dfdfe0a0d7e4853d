// The CUDA matmul of decode-sized batches with dense weights (f32, bf16 or f16):
//
//   DenseGemv: y[r, o] = sum_i x[r, i] * W[o, i] (+ bias[o])   r < num_rows <= kDenseGemvMaxRows
//              x: [num_rows, in_features] f32, row stride x_stride
//              W: [out_features, in_features] in dtype, rows contiguous
//              y: [num_rows, out_features] f32, row stride y_stride
//
// Why a kernel of our own: a matmul of one row reads every weight byte once and does two
// operations per element, so its time is the weights' bytes over the memory bandwidth. In a
// profile of a batch-1 decode step of a 1.1B model on an H200, cuBLAS's kernels took 1.3 ms for
// 2.1 GB of weights (a third of the copy bandwidth), and its tensor-core path needs x rounded to
// the weights' type by a kernel of its own first. Here x stays f32, as on the CPU backend:
// products and sums are f32, no input is rounded. Measured on an H200
// (bench/kernels/cuda_gemv_bench.cc), one row reads large matrices at 0.85-1.0 of the copy
// bandwidth and small ones in a third of cuBLAS's time. Each weight vector is multiplied with
// every x row, whose elements come from cache, so the cost grows with the rows: at 2 rows the
// kernel is level with cuBLAS, at 8 rows 2.2-3.5x slower. CudaOps therefore gives it one row
// (CudaOps::kDenseGemvRows); the kernel takes up to 8 and is tested for all of them.
//
// Work split. A block of 128 threads owns F consecutive output features (F = 4, 2 or 1: fewer
// for narrow outputs, so that the grid still spreads over every multiprocessor). Its threads walk
// the reduction dimension together in vectors of 16 bytes of weights (8 bf16/f16 or 4 f32
// elements): thread t takes vectors t, t + 128, ..., and loads U of them for each of the F rows
// before it uses any (U * F = 8 loads of 16 bytes in flight per thread), then converts them to
// f32 and accumulates their dot products with the same elements of every x row (read through the
// read-only cache; x is small and shared by every block). A warp-shuffle sum and a sum over the
// block's 4 warps in shared memory, in a fixed order, end each output. Each weight byte is read
// once. The vector loads need in_features to be a multiple of the vector, the weight and x to be
// 16-byte aligned and x_stride a multiple of 4 (when num_rows > 1); otherwise the kernel loads
// one element at a time (same results, slower).
// Bytes moved: out_features * in_features * sizeof(dtype) + num_rows * (in_features +
// out_features) * 4 (+ the bias).
//
// Plain C++ header: the launcher takes device pointers and a stream, queues the kernel and returns
// the launch error; it never allocates or synchronises, so it can be captured in a CUDA graph.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/common/dtype.h"

namespace loom::cuda {

// The most x rows one DenseGemv call takes; larger batches go to cuBLAS.
inline constexpr int32_t kDenseGemvMaxRows = 8;

// Returns cudaErrorInvalidValue for a dtype other than f32, bf16 and f16, negative sizes,
// num_rows > kDenseGemvMaxRows, x_stride < in_features (when num_rows > 1) or y_stride <
// out_features (when num_rows > 1); cudaSuccess without a launch when num_rows or out_features
// is 0. bias may be null.
cudaError_t DenseGemv(const float* x, int64_t x_stride, int32_t num_rows, const void* weight,
                      DType dtype, int32_t out_features, int32_t in_features, const float* bias,
                      float* y, int64_t y_stride, cudaStream_t stream);

// The grouped form (a mixture-of-experts layer's experts in one launch): rows [group_offsets[g],
// group_offsets[g + 1]) of x and y go through weights[g] ([out_features, in_features] in dtype),
// for g < num_groups. The offsets and the weight pointers are read on the device, so the launch
// does not depend on them; at most max_group_rows rows per group are computed (blocks of
// kDenseGemvMaxRows rows of one group; a block past its group's rows returns at once). The vector
// loads need every weight 16-byte aligned and in_features a multiple of the vector, which the
// caller guarantees (CudaOps::CreateExpertTable checks it once), and x as DenseGemv needs it.
// Returns cudaErrorInvalidValue for a dtype other than f32, bf16 and f16, negative sizes,
// num_groups above 65535, x_stride < in_features or y_stride < out_features; no bias.
cudaError_t DenseGemvGrouped(const float* x, int64_t x_stride, const int32_t* group_offsets,
                             int32_t num_groups, int32_t max_group_rows,
                             const void* const* weights, DType dtype, int32_t out_features,
                             int32_t in_features, float* y, int64_t y_stride,
                             cudaStream_t stream);

// The tensor-core variant, for bf16 and f16 weights: x is rounded to the weights' type (as the
// cuBLAS path rounds it) and multiplied with mma.m16n8k16, the x rows as the MMA's 8 columns, so
// each weight element is one operand of an MMA whatever the rows, and x is read once per 16
// features instead of once per feature. A block of 8 warps owns 16 output features; the warps
// split the reduction in chunks of 32 elements, each lane loading 16 bytes of two weight rows
// per chunk. The source loads 4 chunks ahead; ptxas interleaves those loads with the MMAs (about
// 2 chunks in flight per warp in the machine code), so large matrices rely on the other resident
// blocks (5 per SM by registers) for the rest. Needs in_features a multiple of 32, weight and x
// 16-byte aligned and x_stride a multiple of 4 (when num_rows > 1); returns cudaErrorInvalidValue
// otherwise, and for other dtypes or more than kDenseGemvMaxRows rows. CudaOps does not use it
// yet: it has not run on hardware (tests/gpu/dense_gemv_test.cc and cuda_gemv_bench measure it
// there, against cuBLAS, for the 2-8 rows the kernel above is slow on).
cudaError_t DenseGemvMma(const float* x, int64_t x_stride, int32_t num_rows, const void* weight,
                         DType dtype, int32_t out_features, int32_t in_features,
                         const float* bias, float* y, int64_t y_stride, cudaStream_t stream);

}  // namespace loom::cuda
