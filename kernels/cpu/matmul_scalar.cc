// Portable matmul (Isa::kScalar): the FMA kernel of matmul_dot_inl.h on one f32 lane, built with
// the baseline flags only. It exists so every machine has a path and so dispatch tests have a
// floor; the compiler may still vectorise it with SSE2.
#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/cpu/matmul_dot_inl.h"

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
};

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
