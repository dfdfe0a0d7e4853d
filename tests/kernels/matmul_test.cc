// Parity of every CPU matmul path with kernels/ref, on odd shapes, strides, thread counts and
// weight dtypes; the group form; batch invariance (GEMM row == GEMV call); argument checks.
//
// Buffers are sized exactly (weights start one element past an allocation boundary, so they are
// unaligned), so AddressSanitizer (cpu-debug preset) catches any read past a row or a matrix.
// Instruction sets this CPU lacks are skipped, not faked. ctest also runs this file against the
// ISA-emulation build of the kernels ("emulated:" tests, tests/CMakeLists.txt), where every level
// is supported and nothing is skipped.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/common/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ref/matmul_ref.h"

namespace loom::cpu {
namespace {

// Tolerances, as a fraction of scale[i, j] = sum_k |x[i, k] * w[j, k]| + |bias[j]|, the natural
// size of the rounding error of a dot product:
// - f32-exact paths (scalar/AVX2/AVX-512 GEMV and GEMM, AMX split-bf16): products are exact (or,
//   split-bf16, within 2^-17 of exact) and both sides sum in f32 in different orders; with random
//   signs the summation error stays far below 1e-5 of scale even at k = 2048.
// - AMX, and AVX-512 on bf16 weights (the vdpbf16ps GEMM, and GEMV for m = 1), with
//   MatmulPrecision::kBf16: x is rounded to bf16 (relative error <= 2^-9 per product), so the
//   bound is 2^-9 of scale plus the f32 summation error: 4e-3.
constexpr double kExactTolerance = 1e-5;
constexpr double kBf16Tolerance = 4e-3;

constexpr int64_t kMs[] = {1, 2, 3, 5, 8, 15, 16, 17, 33, 100};
constexpr int64_t kKs[] = {1, 7, 31, 32, 33, 64, 100, 2048};
constexpr int64_t kNs[] = {1, 15, 16, 17, 100, 257};

ThreadPool& Pool(int num_threads) {
  static ThreadPool* pools[4] = {nullptr, new ThreadPool(1), new ThreadPool(2), new ThreadPool(3)};
  return *pools[num_threads];
}

bool IsaSupported(Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(MaxIsa(DetectCpuFeatures()));
}

// A weight stored in `dtype`, starting one element into its allocation (unaligned) and ending
// exactly at the allocation's end.
struct Weight {
  std::vector<uint8_t> storage;
  const void* data = nullptr;
  DType dtype = DType::kF32;
};

Weight MakeWeight(DType dtype, int64_t n, int64_t k, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t elem = DTypeSize(dtype);
  Weight w;
  w.dtype = dtype;
  w.storage.resize((static_cast<size_t>(n * k) + 1) * elem);
  void* data = w.storage.data() + elem;
  for (int64_t i = 0; i < n * k; ++i) StoreFromF32(data, dtype, static_cast<size_t>(i), dist(rng));
  w.data = data;
  return w;
}

// x [m, k] with row stride `stride`; the allocation ends right after the last row's k-th element.
std::vector<float> MakeX(int64_t m, int64_t k, int64_t stride, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>((m - 1) * stride + k));
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<float> MakeVector(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& e : v) e = dist(rng);
  return v;
}

// scale[i, j] (see the tolerances above).
std::vector<double> Scale(const std::vector<float>& x, int64_t m, int64_t k, int64_t x_stride,
                          const Weight& w, int64_t n, const float* bias) {
  std::vector<double> scale(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bias != nullptr ? std::fabs(bias[j]) : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        s += std::fabs(double{x[i * x_stride + kk]} *
                       LoadAsF32(w.data, w.dtype, static_cast<size_t>(j * k + kk)));
      }
      scale[i * n + j] = s;
    }
  }
  return scale;
}

// Compares y [m, n] (stride y_stride) with the reference; padding columns must be untouched NaN.
void ExpectNear(const std::vector<float>& y, const std::vector<float>& want,
                const std::vector<double>& scale, int64_t m, int64_t n, int64_t y_stride,
                double tolerance, const std::string& what) {
  int failures = 0;
  for (int64_t i = 0; i < m && failures < 5; ++i) {
    const int64_t row_len = i + 1 < m ? y_stride : n;  // the last row has no padding
    for (int64_t j = 0; j < row_len && failures < 5; ++j) {
      const float got = y[i * y_stride + j];
      if (j >= n) {
        if (!std::isnan(got)) {
          ADD_FAILURE() << what << ": padding y[" << i << ", " << j << "] was written";
          ++failures;
        }
        continue;
      }
      const double err = std::fabs(double{got} - want[i * n + j]);
      const double bound = tolerance * scale[i * n + j] + 1e-30;
      if (!(err <= bound)) {
        ADD_FAILURE() << what << ": y[" << i << ", " << j << "] = " << got << ", want "
                      << want[i * n + j] << " (error " << err << " > " << bound << ")";
        ++failures;
      }
    }
  }
}

struct Shape {
  int64_t m, k, n;
};

// Each m with each k (n rotating through kNs), then each m with each n at k = 33 (a k tail that
// is odd, so a bf16 pair would straddle weight rows), then two large-m shapes.
std::vector<Shape> TestShapes() {
  std::vector<Shape> shapes;
  int rotate = 0;
  for (int64_t m : kMs) {
    for (int64_t k : kKs) shapes.push_back({m, k, kNs[rotate++ % std::size(kNs)]});
  }
  for (int64_t m : kMs) {
    for (int64_t n : kNs) shapes.push_back({m, 33, n});
  }
  // More tokens than one block of x (every GEMM splits m into blocks of at most 256) and a k that
  // spans several k blocks with a tail.
  shapes.push_back({300, 100, 40});
  shapes.push_back({260, 1100, 17});
  return shapes;
}

std::vector<uint8_t> Workspace(int64_t m, int64_t k, int num_threads, const MatmulOptions& opt) {
  return std::vector<uint8_t>(MatmulWorkspaceBytes(m, k, num_threads, opt));
}

using PathCase = std::tuple<Isa, MatmulPath, DType, MatmulPrecision>;

class MatmulPathTest : public testing::TestWithParam<PathCase> {};

TEST_P(MatmulPathTest, MatchesReference) {
  const auto [isa, path, dtype, precision] = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " is not supported by this CPU";
  const MatmulOptions options{precision, path, isa};
  const double tolerance = (isa == Isa::kAmx || isa == Isa::kAvx512) && dtype == DType::kBF16 &&
                                   precision == MatmulPrecision::kBf16
                               ? kBf16Tolerance
                               : kExactTolerance;
  std::mt19937 rng(1234);
  int index = 0;
  for (const Shape& s : TestShapes()) {
    ++index;
    const int threads = 1 + index % 3;
    const int64_t x_stride = s.k + (index % 2 ? 3 : 0);
    const int64_t y_stride = s.n + (index % 3 ? 2 : 0);
    const std::vector<float> x = MakeX(s.m, s.k, x_stride, rng);
    const Weight w = MakeWeight(dtype, s.n, s.k, rng);
    const std::vector<float> bias = MakeVector(s.n, rng);
    const float* bias_ptr = index % 2 == 0 ? bias.data() : nullptr;

    std::vector<float> want(static_cast<size_t>(s.m * s.n));
    ref::Matmul(x.data(), s.m, s.k, x_stride, w.data, dtype, s.n, bias_ptr, want.data(), s.n);
    std::vector<float> y(static_cast<size_t>((s.m - 1) * y_stride + s.n), std::nanf(""));
    std::vector<uint8_t> ws = Workspace(s.m, s.k, threads, options);
    const MatmulStatus status =
        Matmul({x.data(), s.m, s.k, x_stride}, {w.data, dtype, s.n, bias_ptr, y.data(), y_stride},
               Pool(threads), ws.data(), ws.size(), options);
    ASSERT_EQ(status, MatmulStatus::kOk) << MatmulStatusName(status);
    const std::string what = "m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) +
                             " n=" + std::to_string(s.n) + " threads=" + std::to_string(threads);
    ExpectNear(y, want, Scale(x, s.m, s.k, x_stride, w, s.n, bias_ptr), s.m, s.n, y_stride,
               tolerance, what);
  }
}

std::string PathCaseName(const testing::TestParamInfo<PathCase>& info) {
  const auto [isa, path, dtype, precision] = info.param;
  return std::string(IsaName(isa)) + (path == MatmulPath::kGemv ? "_gemv_" : "_gemm_") +
         std::string(DTypeName(dtype)) +
         (precision == MatmulPrecision::kHighest ? "_highest" : "_bf16");
}

INSTANTIATE_TEST_SUITE_P(
    AllPaths, MatmulPathTest,
    testing::Combine(testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                     testing::Values(MatmulPath::kGemv, MatmulPath::kGemm),
                     testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                     testing::Values(MatmulPrecision::kHighest, MatmulPrecision::kBf16)),
    PathCaseName);

// The two layouts of the f32 GEMV (GemvLayout) read the rows in different orders and prefetch
// differently but sum each row the same way: the same bits, and both within the reference's
// tolerance, on AVX2, AVX-512 and AMX, for every float dtype, m = 1..5, row counts that leave
// partial runs, k tails and 1-3 threads.
TEST(MatmulTest, GemvLayoutsGiveTheSameSums) {
  const Shape shapes[] = {{1, 2048, 257}, {1, 33, 100},   {2, 100, 17},  {3, 7, 64},   {1, 31, 1},
                          {2, 64, 15},    {3, 2048, 100}, {4, 33, 257},  {5, 2048, 40}};
  std::mt19937 rng(77);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (!IsaSupported(isa)) continue;
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      int index = 0;
      for (const Shape& s : shapes) {
        const int threads = 1 + index++ % 3;
        const std::vector<float> x = MakeX(s.m, s.k, s.k, rng);
        const Weight w = MakeWeight(dtype, s.n, s.k, rng);
        const std::vector<float> bias = MakeVector(s.n, rng);
        std::vector<float> want(static_cast<size_t>(s.m * s.n));
        ref::Matmul(x.data(), s.m, s.k, s.k, w.data, dtype, s.n, bias.data(), want.data(), s.n);
        std::vector<float> ys[2];
        const GemvLayout layouts[2] = {GemvLayout::kZen4, GemvLayout::kSapphireRapids};
        for (int l = 0; l < 2; ++l) {
          MatmulOptions options{MatmulPrecision::kHighest, MatmulPath::kGemv, isa};
          options.gemv_layout = layouts[l];
          ys[l].assign(static_cast<size_t>(s.m * s.n), std::nanf(""));
          std::vector<uint8_t> ws = Workspace(s.m, s.k, threads, options);
          ASSERT_EQ(Matmul({x.data(), s.m, s.k, s.k},
                           {w.data, dtype, s.n, bias.data(), ys[l].data(), s.n}, Pool(threads),
                           ws.data(), ws.size(), options),
                    MatmulStatus::kOk);
          const std::string what = std::string(IsaName(isa)) + " " +
                                   std::string(DTypeName(dtype)) + " layout=" +
                                   (l == 0 ? "zen4" : "spr") + " m=" + std::to_string(s.m) +
                                   " k=" + std::to_string(s.k) + " n=" + std::to_string(s.n);
          ExpectNear(ys[l], want, Scale(x, s.m, s.k, s.k, w, s.n, bias.data()), s.m, s.n, s.n,
                     kExactTolerance, what);
        }
        EXPECT_EQ(0, std::memcmp(ys[0].data(), ys[1].data(), ys[0].size() * sizeof(float)))
            << IsaName(isa) << " " << DTypeName(dtype) << " m=" << s.m << " k=" << s.k
            << " n=" << s.n;
      }
    }
  }
}

// The AVX512-BF16 GEMM and GEMV (vdpbf16ps) at kBf16 are exact on x rounded to bf16: products of
// two bf16 are exact in f32, so against the reference run on the rounded x only the summation
// order differs. A wrong pairing of k, a lost odd element or a misplaced token shows up far above
// that.
class MatmulBf16DotTest : public testing::TestWithParam<MatmulPath> {};

TEST_P(MatmulBf16DotTest, Avx512IsExactOnBf16RoundedX) {
  if (!IsaSupported(Isa::kAvx512)) GTEST_SKIP() << "AVX-512 is not supported by this CPU";
  const MatmulOptions options{MatmulPrecision::kBf16, GetParam(), Isa::kAvx512};
  std::mt19937 rng(77);
  int index = 0;
  std::vector<Shape> shapes = TestShapes();
  // More tokens than one of this path's blocks (512), and whole groups of 12 weight rows with k
  // blocks that end in a partial run of 16 pairs and an odd last element.
  shapes.push_back({530, 301, 36});
  for (const Shape& s : shapes) {
    ++index;
    const int threads = 1 + index % 3;
    const int64_t x_stride = s.k + (index % 2 ? 5 : 0);
    std::vector<float> x = MakeX(s.m, s.k, x_stride, rng);
    for (float& v : x) v = Bf16ToF32(F32ToBf16(v));
    const Weight w = MakeWeight(DType::kBF16, s.n, s.k, rng);
    const std::vector<float> bias = MakeVector(s.n, rng);
    const float* bias_ptr = index % 2 == 0 ? bias.data() : nullptr;
    std::vector<float> want(static_cast<size_t>(s.m * s.n));
    ref::Matmul(x.data(), s.m, s.k, x_stride, w.data, DType::kBF16, s.n, bias_ptr, want.data(),
                s.n);
    std::vector<float> y(static_cast<size_t>(s.m * s.n), std::nanf(""));
    std::vector<uint8_t> ws = Workspace(s.m, s.k, threads, options);
    ASSERT_EQ(Matmul({x.data(), s.m, s.k, x_stride}, {w.data, DType::kBF16, s.n, bias_ptr, y.data(), s.n},
                     Pool(threads), ws.data(), ws.size(), options),
              MatmulStatus::kOk);
    ExpectNear(y, want, Scale(x, s.m, s.k, x_stride, w, s.n, bias_ptr), s.m, s.n, s.n,
               kExactTolerance,
               "m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) + " n=" + std::to_string(s.n));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, MatmulBf16DotTest,
                         testing::Values(MatmulPath::kGemv, MatmulPath::kGemm),
                         [](const testing::TestParamInfo<MatmulPath>& info) {
                           return std::string(info.param == MatmulPath::kGemv ? "gemv" : "gemm");
                         });

class MatmulIsaTest : public testing::TestWithParam<Isa> {};

// Runs one group of three weights (q/k/v-like sizes) sharing x and checks each against the
// reference.
void CheckGroup(const MatmulOptions& options, const DType (&dtypes)[3], int64_t m, int threads,
                std::mt19937& rng) {
  const int64_t k = 100;
  const int64_t ns[3] = {64, 17, 33};
  const std::vector<float> x = MakeX(m, k, k, rng);
  std::vector<Weight> weights;
  std::vector<std::vector<float>> biases, ys;
  std::vector<MatmulProjection> projections;
  for (int p = 0; p < 3; ++p) {
    weights.push_back(MakeWeight(dtypes[p], ns[p], k, rng));
    biases.push_back(MakeVector(ns[p], rng));
    ys.emplace_back(static_cast<size_t>(m * ns[p]), std::nanf(""));
  }
  for (int p = 0; p < 3; ++p) {
    const float* bias = p == 1 ? nullptr : biases[p].data();
    projections.push_back({weights[p].data, dtypes[p], ns[p], bias, ys[p].data(), ns[p]});
  }
  std::vector<uint8_t> ws = Workspace(m, k, threads, options);
  ASSERT_EQ(
      MatmulGroup({x.data(), m, k, k}, projections, Pool(threads), ws.data(), ws.size(), options),
      MatmulStatus::kOk);
  for (int p = 0; p < 3; ++p) {
    std::vector<float> want(static_cast<size_t>(m * ns[p]));
    ref::Matmul(x.data(), m, k, k, weights[p].data, dtypes[p], ns[p], projections[p].bias,
                want.data(), ns[p]);
    ExpectNear(ys[p], want, Scale(x, m, k, k, weights[p], ns[p], projections[p].bias), m, ns[p],
               ns[p], kExactTolerance,
               "projection " + std::to_string(p) + " m=" + std::to_string(m) +
                   " threads=" + std::to_string(threads));
  }
}

// The group form, all bf16 (the AMX tile path) and with mixed dtypes, on both paths.
TEST_P(MatmulIsaTest, GroupMatchesSeparateReferences) {
  const Isa isa = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " is not supported by this CPU";
  std::mt19937 rng(99);
  const DType all_bf16[3] = {DType::kBF16, DType::kBF16, DType::kBF16};
  const DType mixed[3] = {DType::kBF16, DType::kF16, DType::kF32};
  for (MatmulPath path : {MatmulPath::kGemv, MatmulPath::kGemm}) {
    const MatmulOptions options{MatmulPrecision::kHighest, path, isa};
    for (int64_t m : {1, 3, 40}) {
      for (int threads : {1, 2, 3}) {
        CheckGroup(options, all_bf16, m, threads, rng);
        CheckGroup(options, mixed, m, threads, rng);
      }
    }
  }
}

// Runs one group on 1, 2 and 3 threads (twice each of 2 and 3): the first result against the
// reference, every later one the same to the bit.
void CheckThreadCountInvariant(const MatmulOptions& options, int64_t m, int64_t k,
                               const int64_t (&ns)[3], const DType (&dtypes)[3], double tolerance,
                               const std::string& label) {
  std::mt19937 rng(5);
  const std::vector<float> x = MakeX(m, k, k, rng);
  std::vector<Weight> weights;
  for (int p = 0; p < 3; ++p) weights.push_back(MakeWeight(dtypes[p], ns[p], k, rng));
  std::vector<std::vector<float>> first;
  for (int threads : {1, 2, 3, 2, 3}) {
    std::vector<std::vector<float>> ys;
    std::vector<MatmulProjection> projections;
    for (int p = 0; p < 3; ++p) ys.emplace_back(static_cast<size_t>(m * ns[p]), std::nanf(""));
    for (int p = 0; p < 3; ++p) {
      projections.push_back({weights[p].data, dtypes[p], ns[p], nullptr, ys[p].data(), ns[p]});
    }
    std::vector<uint8_t> ws = Workspace(m, k, threads, options);
    ASSERT_EQ(MatmulGroup({x.data(), m, k, k}, projections, Pool(threads), ws.data(), ws.size(),
                          options),
              MatmulStatus::kOk);
    if (first.empty()) {
      for (int p = 0; p < 3; ++p) {
        std::vector<float> want(static_cast<size_t>(m * ns[p]));
        ref::Matmul(x.data(), m, k, k, weights[p].data, dtypes[p], ns[p], nullptr, want.data(),
                    ns[p]);
        ExpectNear(ys[p], want, Scale(x, m, k, k, weights[p], ns[p], nullptr), m, ns[p], ns[p],
                   tolerance, "projection " + std::to_string(p) + " " + label);
      }
      first = ys;
      continue;
    }
    for (int p = 0; p < 3; ++p) {
      ASSERT_EQ(0, std::memcmp(ys[p].data(), first[p].data(), ys[p].size() * sizeof(float)))
          << "projection " << p << " threads=" << threads << " " << label;
    }
  }
}

// The GEMM path hands its units out with stealing (kernels/cpu/work_claims.h): the output is the
// same to the bit whichever thread ran which unit, for any thread count (with more threads than
// cores, as on the 2-core CI machine, threads are descheduled and others take their last units).
// Several token blocks, k blocks and row blocks per projection, mixed dtypes.
TEST_P(MatmulIsaTest, GemmIsThreadCountInvariant) {
  const Isa isa = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " is not supported by this CPU";
  const int64_t ns[3] = {400, 130, 97};
  // kBf16 on AVX-512 takes the vdpbf16ps panels (bf16 weights only).
  for (MatmulPrecision precision : {MatmulPrecision::kHighest, MatmulPrecision::kBf16}) {
    const bool bf16 = precision == MatmulPrecision::kBf16;
    const DType dtypes[3] = {DType::kBF16, bf16 ? DType::kBF16 : DType::kF16,
                             bf16 ? DType::kBF16 : DType::kF32};
    CheckThreadCountInvariant({precision, MatmulPath::kGemm, isa}, 300, 768, ns, dtypes,
                              bf16 ? kBf16Tolerance : kExactTolerance, bf16 ? "bf16" : "");
  }
}

// The GEMV cuts each thread's share into pieces and lets a thread that finishes take another's
// last pieces (GemvStealPieces): a row's sum does not depend on which thread ran it or where the
// pieces fall. The group holds 4.3 MB of bf16 weights (mixed dtypes: more), enough for every
// thread count here to cut its share into several pieces; m = 1 also at kBf16 (the vdpbf16ps
// GEMV on AVX512-BF16), m = 4 through the FMA GEMV.
TEST_P(MatmulIsaTest, GemvIsThreadCountInvariant) {
  const Isa isa = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " is not supported by this CPU";
  const int64_t ns[3] = {1500, 301, 250};
  for (MatmulPrecision precision : {MatmulPrecision::kHighest, MatmulPrecision::kBf16}) {
    const bool bf16 = precision == MatmulPrecision::kBf16;
    const DType dtypes[3] = {DType::kBF16, bf16 ? DType::kBF16 : DType::kF16,
                             bf16 ? DType::kBF16 : DType::kF32};
    for (int64_t m : {1, 4}) {
      CheckThreadCountInvariant({precision, MatmulPath::kGemv, isa}, m, 1024, ns, dtypes,
                                bf16 ? kBf16Tolerance : kExactTolerance,
                                std::string(bf16 ? "bf16" : "") + " m=" + std::to_string(m));
    }
  }
}

// Row i of a large-m call (GEMM path) equals the m = 1 call on that row (GEMV path), so a token's
// result does not depend on the batch it is computed in.
TEST_P(MatmulIsaTest, BatchInvariant) {
  const Isa isa = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " is not supported by this CPU";
  const MatmulOptions options{MatmulPrecision::kHighest, MatmulPath::kAuto, isa};
  ASSERT_EQ(ChooseMatmulPath(1, options), MatmulPath::kGemv);
  std::mt19937 rng(7);
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const int64_t m = 100, k = 2048, n = 257;
    ASSERT_EQ(ChooseMatmulPath(m, options), MatmulPath::kGemm);
    const std::vector<float> x = MakeX(m, k, k, rng);
    const Weight w = MakeWeight(dtype, n, k, rng);
    const std::vector<float> bias = MakeVector(n, rng);
    std::vector<float> batch(static_cast<size_t>(m * n));
    std::vector<uint8_t> ws = Workspace(m, k, 2, options);
    ASSERT_EQ(Matmul({x.data(), m, k, k}, {w.data, dtype, n, bias.data(), batch.data(), n}, Pool(2),
                     ws.data(), ws.size(), options),
              MatmulStatus::kOk);
    const std::vector<double> scale = Scale(x, m, k, k, w, n, bias.data());
    for (int64_t i = 0; i < m; i += 7) {
      std::vector<float> alone(static_cast<size_t>(n));
      ASSERT_EQ(
          Matmul({x.data() + i * k, 1, k, k}, {w.data, dtype, n, bias.data(), alone.data(), n},
                 Pool(2), nullptr, 0, options),
          MatmulStatus::kOk);
      const std::vector<double> row_scale(scale.begin() + i * n, scale.begin() + (i + 1) * n);
      const std::vector<float> batch_row(batch.begin() + i * n, batch.begin() + (i + 1) * n);
      ExpectNear(alone, batch_row, row_scale, 1, n, n, kExactTolerance,
                 std::string(DTypeName(dtype)) + " row " + std::to_string(i));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, MatmulIsaTest,
                         testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                         [](const testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

TEST(MatmulTest, EmptyKWritesBias) {
  const float x[2] = {};
  const float bias[3] = {1.0f, -2.0f, 3.0f};
  const uint16_t weight[1] = {};
  float y[6];
  ASSERT_EQ(Matmul({x, 2, 0, 1}, {weight, DType::kBF16, 3, bias, y, 3}, Pool(2), nullptr, 0),
            MatmulStatus::kOk);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(y[i * 3 + j], bias[j]);
  }
}

TEST(MatmulTest, RejectsBadArguments) {
  float x[4] = {};
  float y[4] = {};
  const float weight[4] = {};
  EXPECT_EQ(Matmul({x, 2, 2, 1}, {weight, DType::kF32, 2, nullptr, y, 2}, Pool(1), nullptr, 0),
            MatmulStatus::kInvalidArgument);  // x stride < k
  EXPECT_EQ(Matmul({x, 2, 2, 2}, {weight, DType::kI32, 2, nullptr, y, 2}, Pool(1), nullptr, 0),
            MatmulStatus::kInvalidArgument);  // not a float weight
  EXPECT_EQ(Matmul({x, 2, 2, 2}, {nullptr, DType::kF32, 2, nullptr, y, 2}, Pool(1), nullptr, 0),
            MatmulStatus::kInvalidArgument);
  EXPECT_EQ(Matmul({x, 2, 2, 2}, {weight, DType::kF32, 2, nullptr, y, 1}, Pool(1), nullptr, 0),
            MatmulStatus::kInvalidArgument);  // y stride < n
}

TEST(MatmulTest, ChecksIsaAndWorkspace) {
  float x[64 * 32] = {};
  float y[64 * 16] = {};
  const uint16_t weight[16 * 32] = {};
  const MatmulOptions amx{MatmulPrecision::kHighest, MatmulPath::kGemm, Isa::kAmx};
  const MatmulStatus status =
      Matmul({x, 64, 32, 32}, {weight, DType::kBF16, 16, nullptr, y, 16}, Pool(1), nullptr, 0, amx);
  if (IsaSupported(Isa::kAmx)) {
    EXPECT_GT(MatmulWorkspaceBytes(64, 32, 1, amx), 0u);
    EXPECT_EQ(status, MatmulStatus::kWorkspaceTooSmall);
  } else {
    EXPECT_EQ(status, MatmulStatus::kUnsupportedIsa);
  }
  // The GEMV paths and the scalar GEMM need no workspace; the SIMD GEMMs do, and so does the
  // vdpbf16ps GEMV (kBf16, m = 1) for x in bf16.
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    const MatmulOptions gemv{MatmulPrecision::kHighest, MatmulPath::kGemv, isa};
    const MatmulOptions gemm{MatmulPrecision::kHighest, MatmulPath::kGemm, isa};
    const MatmulOptions bf16_gemv{MatmulPrecision::kBf16, MatmulPath::kGemv, isa};
    EXPECT_EQ(MatmulWorkspaceBytes(64, 4096, 2, gemv), 0u);
    EXPECT_EQ(MatmulWorkspaceBytes(64, 4096, 2, bf16_gemv), 0u);
    const bool dot = isa == Isa::kAvx512 || isa == Isa::kAmx;
    EXPECT_EQ(MatmulWorkspaceBytes(1, 4096, 2, bf16_gemv), dot ? 64u + 4096 * 2 : 0u);
    EXPECT_EQ(MatmulWorkspaceBytes(2, 4096, 2, bf16_gemv), 0u);
    EXPECT_EQ(MatmulWorkspaceBytes(64, 4096, 2, gemm) > 0, isa != Isa::kScalar);
  }
  if (IsaSupported(Isa::kAvx2)) {
    const MatmulOptions avx2{MatmulPrecision::kHighest, MatmulPath::kGemm, Isa::kAvx2};
    EXPECT_EQ(Matmul({x, 64, 32, 32}, {weight, DType::kBF16, 16, nullptr, y, 16}, Pool(1), nullptr,
                     0, avx2),
              MatmulStatus::kWorkspaceTooSmall);
  }
}

// The AMX default splits x into three bf16 parts that sum to it exactly, so with an identity
// weight (one exact product per output) y is x bit for bit, as on the FMA paths. Two parts would
// drop x's last 8 significant bits.
TEST(MatmulTest, AmxDefaultPrecisionKeepsEveryBitOfX) {
  if (!IsaSupported(Isa::kAmx)) GTEST_SKIP() << "no AMX";
  constexpr int64_t kM = 64, kK = 96;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> x(kM * kK);
  for (float& v : x) v = dist(rng);
  std::vector<uint16_t> identity(kK * kK, 0);
  for (int64_t i = 0; i < kK; ++i) identity[i * kK + i] = F32ToBf16(1.0f);
  const MatmulOptions amx{MatmulPrecision::kHighest, MatmulPath::kGemm, Isa::kAmx};
  std::vector<uint8_t> ws(MatmulWorkspaceBytes(kM, kK, 2, amx));
  std::vector<float> y(kM * kK, -1.0f);
  ASSERT_EQ(Matmul({x.data(), kM, kK, kK}, {identity.data(), DType::kBF16, kK, nullptr, y.data(), kK},
                   Pool(2), ws.data(), ws.size(), amx),
            MatmulStatus::kOk);
  for (int64_t i = 0; i < kM * kK; ++i) ASSERT_EQ(y[i], x[i]) << i;
}

#if defined(LOOM_ISA_EMULATION)
// Against the emulated kernels every level must run, or the AVX-512 and AMX cases above would
// skip and prove nothing.
TEST(MatmulTest, EmulationSupportsEveryIsa) { EXPECT_TRUE(IsaSupported(Isa::kAmx)); }
#endif

TEST(MatmulTest, AutoPathSwitchesAtTheGemvLimit) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    const MatmulOptions options{MatmulPrecision::kHighest, MatmulPath::kAuto, isa};
    const int64_t limit = MatmulGemvMaxM(isa);
    EXPECT_EQ(ChooseMatmulPath(limit, options), MatmulPath::kGemv);
    EXPECT_EQ(ChooseMatmulPath(limit + 1, options), MatmulPath::kGemm);
  }
}

}  // namespace
}  // namespace loom::cpu
