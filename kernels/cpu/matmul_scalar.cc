// Portable matmul (Isa::kScalar): the FMA kernel of matmul_dot_inl.h on one f32 lane, built with
// the baseline flags only; block-quantized weights are dequantized a block at a time by the
// reference decoder (Scalar::QuantRows). It exists so every machine has a path and so dispatch tests have a
// floor; the compiler may still vectorise it with SSE2.
#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/cpu/matmul_dot_inl.h"
#include "kernels/ref/quant_ref.h"

namespace loom::cpu::matmul_internal {
namespace {

struct Scalar {
  using V = float;
  static constexpr int kLanes = 1;

  static V Zero() { return 0.0f; }
  static V Fma(V a, V b, V c) { return a * b + c; }
  static V LoadX(const float* p) { return *p; }
  static V LoadXPartial(const float* p, int /*count*/) { return *p; }  // never called: 1 lane

  template <class W>
  static V LoadW(const typename W::Storage* p) {
    if constexpr (std::is_same_v<W, F32Weight>) {
      return *p;
    } else if constexpr (std::is_same_v<W, F16Weight>) {
      return Fp16ToF32(*p);
    } else {
      return Bf16ToF32(*p);
    }
  }
  template <class W>
  static V LoadWPartial(const typename W::Storage* p, int /*count*/) {
    return LoadW<W>(p);
  }

  static float ReduceAdd(V v) { return v; }
  static void Prefetch(const char* p) { __builtin_prefetch(p); }

  static void QuantRows(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin,
                        int64_t row_end);
};

// Block-quantized weights: each block of a row is dequantized (ref::DequantizeRow) into a local
// buffer and dotted with up to kXRows rows of x before the next block; a row is decoded
// ceil(m / kXRows) times.
void Scalar::QuantRows(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin,
                       int64_t row_end) {
  constexpr int kXRows = 8;
  constexpr int kMaxBlockElems = 256;
  const DTypeTraits traits = TraitsOf(p.dtype);
  const int64_t row_bytes = DTypeRowBytes(p.dtype, x.k);
  const int64_t num_blocks = x.k / traits.block_elems;
  float w[kMaxBlockElems];
  for (int64_t j = row_begin; j < row_end; ++j) {
    const uint8_t* row = static_cast<const uint8_t*>(p.weight) + j * row_bytes;
    for (int64_t i0 = 0; i0 < x.m; i0 += kXRows) {
      const int64_t rows = MinOf<int64_t>(kXRows, x.m - i0);
      float acc[kXRows] = {};
      for (int64_t b = 0; b < num_blocks; ++b) {
        ref::DequantizeRow(p.dtype, row + b * traits.block_bytes, traits.block_elems, w);
        for (int64_t a = 0; a < rows; ++a) {
          const float* xb = x.data + (i0 + a) * x.stride + b * traits.block_elems;
          float sum = 0.0f;
          for (int l = 0; l < traits.block_elems; ++l) sum += xb[l] * w[l];
          acc[a] += sum;
        }
      }
      for (int64_t a = 0; a < rows; ++a) {
        p.y[(i0 + a) * p.y_stride + j] = p.bias != nullptr ? acc[a] + p.bias[j] : acc[a];
      }
    }
  }
}

constexpr FmaBlocking kGemmBlocking = {48, 512, 64};

}  // namespace

void GemvScalar(const GroupArgs& args, ThreadPool& pool) {
  if (args.x.m == 1) {
    RunGemvGroup<Scalar, 1, 8, 0>(args, pool);
  } else {
    RunGemvGroup<Scalar, 4, 4, 0>(args, pool);
  }
}

void GemmScalar(const GroupArgs& args, ThreadPool& pool) {
  RunBlockedGroup<Scalar, 4, 4>(args, pool, kGemmBlocking);
}

}  // namespace loom::cpu::matmul_internal
