// Parity of the CPU matmul with block-quantized weights (q8_0, q4_0, q4_1, q4_k, q5_k, q6_k)
// against the reference: ref::DequantizeRow of every weight row, then ref::Matmul in f32. Every
// instruction-set level this CPU runs (and, in the "emulated:" build, all of them), both paths,
// m from 1 to 130, odd n, k of one to several blocks, 1 to 3 threads, with and without bias, and
// groups that mix formats (as a Q4_K_M file mixes q4_k and q6_k).
//
// Weights are random bytes with sane f16 scale fields, so every bit of every nibble, high bit,
// packed 6-bit scale and min is exercised: a wrong nibble order, a wrong scale unpacking or a
// misplaced high bit changes the result far beyond the tolerance. Each weight starts one byte into
// its allocation and ends at its end (unaligned; AddressSanitizer sees any read past a row).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/common/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/quant_ref.h"

namespace loom::cpu {
namespace {

// The kernels multiply f32 x by the exact dequantized weights (decoded in registers) and sum in
// f32 in another order than the reference: far below 1e-5 of sum_k |x * w|. A decoding error
// (a nibble, a scale, a high bit) is of the order of a whole term.
constexpr double kTolerance = 1e-5;

constexpr DType kFormats[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                              DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr int64_t kMs[] = {1, 2, 3, 5, 8, 16, 33, 64, 130};
constexpr int64_t kNs[] = {1, 7, 37, 65};

ThreadPool& Pool(int num_threads) {
  static ThreadPool* pools[4] = {nullptr, new ThreadPool(1), new ThreadPool(2), new ThreadPool(3)};
  return *pools[num_threads];
}

bool IsaSupported(Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(MaxIsa(DetectCpuFeatures()));
}

void PutHalf(uint8_t* p, float value) {
  const uint16_t bits = F32ToFp16(value);
  std::memcpy(p, &bits, sizeof(bits));
}

// A weight [n, k] in a quantized `dtype`: random bytes, then every block's f16 fields set to
// random finite values (d in [-0.1, 0.1], q4_1's m and the k-quants' dmin in [-0.5, 0.5]).
// `data` starts one byte into `storage` and ends at its end; `dequantized` is ref's reading.
struct QuantWeight {
  std::vector<uint8_t> storage;
  const uint8_t* data = nullptr;
  DType dtype = DType::kQ8_0;
  std::vector<float> dequantized;  // [n, k]
};

QuantWeight MakeQuantWeight(DType dtype, int64_t n, int64_t k, std::mt19937& rng) {
  const DTypeTraits t = TraitsOf(dtype);
  const int64_t row_bytes = DTypeRowBytes(dtype, k);
  QuantWeight w;
  w.dtype = dtype;
  w.storage.resize(static_cast<size_t>(n * row_bytes + 1));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w.storage) b = static_cast<uint8_t>(byte(rng));
  uint8_t* data = w.storage.data() + 1;
  std::uniform_real_distribution<float> d_dist(-0.1f, 0.1f);
  std::uniform_real_distribution<float> m_dist(-0.5f, 0.5f);
  for (int64_t b = 0; b < n * k / t.block_elems; ++b) {
    uint8_t* block = data + b * t.block_bytes;
    switch (dtype) {
      case DType::kQ8_0:
      case DType::kQ4_0:
        PutHalf(block, d_dist(rng));
        break;
      case DType::kQ4_1:
        PutHalf(block, d_dist(rng));
        PutHalf(block + 2, m_dist(rng));
        break;
      case DType::kQ4_K:
      case DType::kQ5_K:
        PutHalf(block, d_dist(rng));
        PutHalf(block + 2, m_dist(rng) * 0.1f);
        break;
      default:  // q6_k: d is the last field
        PutHalf(block + 208, d_dist(rng) * 0.1f);
        break;
    }
  }
  w.data = data;
  w.dequantized.resize(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) {
    ref::DequantizeRow(dtype, data + j * row_bytes, k, w.dequantized.data() + j * k);
  }
  return w;
}

std::vector<float> RandomFloats(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& e : v) e = dist(rng);
  return v;
}

// Checks y [m, n] (stride y_stride; padding must stay NaN) against DequantizeRow + ref::Matmul.
void ExpectMatchesReference(const std::vector<float>& x, int64_t m, int64_t k, int64_t x_stride,
                            const QuantWeight& w, int64_t n, const float* bias,
                            const std::vector<float>& y, int64_t y_stride,
                            const std::string& what) {
  std::vector<float> want(static_cast<size_t>(m * n));
  ref::Matmul(x.data(), m, k, x_stride, w.dequantized.data(), DType::kF32, n, bias, want.data(),
              n);
  int failures = 0;
  for (int64_t i = 0; i < m && failures < 5; ++i) {
    for (int64_t j = 0; j < y_stride && failures < 5; ++j) {
      if (i + 1 == m && j >= n) break;  // the last row has no padding
      const float got = y[i * y_stride + j];
      if (j >= n) {
        if (!std::isnan(got)) {
          ADD_FAILURE() << what << ": padding y[" << i << ", " << j << "] was written";
          ++failures;
        }
        continue;
      }
      double scale = bias != nullptr ? std::fabs(bias[j]) : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        scale += std::fabs(double{x[i * x_stride + kk]} * w.dequantized[j * k + kk]);
      }
      const double err = std::fabs(double{got} - want[i * n + j]);
      if (!(err <= kTolerance * scale + 1e-30)) {
        ADD_FAILURE() << what << ": y[" << i << ", " << j << "] = " << got << ", want "
                      << want[i * n + j] << " (error " << err << ", scale " << scale << ")";
        ++failures;
      }
    }
  }
}

using QuantCase = std::tuple<Isa, MatmulPath, DType>;

class QuantMatmulTest : public testing::TestWithParam<QuantCase> {};

TEST_P(QuantMatmulTest, MatchesDequantizedReference) {
  const auto [isa, path, dtype] = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " is not supported by this CPU";
  const MatmulOptions options{MatmulPrecision::kHighest, path, isa};
  const int64_t block = TraitsOf(dtype).block_elems;
  std::mt19937 rng(static_cast<uint32_t>(100 + static_cast<int>(dtype)));
  int index = 0;
  for (int64_t m : kMs) {
    for (int64_t blocks : {1, 2, 3, 9}) {
      ++index;
      const int64_t k = blocks * block;
      const int64_t n = kNs[index % std::size(kNs)];
      const int threads = 1 + index % 3;
      const int64_t x_stride = k + (index % 2 ? 5 : 0);
      const int64_t y_stride = n + (index % 3 ? 3 : 0);
      const std::vector<float> x = RandomFloats((m - 1) * x_stride + k, rng);
      const QuantWeight w = MakeQuantWeight(dtype, n, k, rng);
      const std::vector<float> bias = RandomFloats(n, rng);
      const float* bias_ptr = index % 2 == 0 ? bias.data() : nullptr;
      std::vector<float> y(static_cast<size_t>((m - 1) * y_stride + n), std::nanf(""));
      std::vector<uint8_t> ws(MatmulWorkspaceBytes(m, k, threads, options));
      const MatmulStatus status =
          Matmul({x.data(), m, k, x_stride}, {w.data, dtype, n, bias_ptr, y.data(), y_stride},
                 Pool(threads), ws.data(), ws.size(), options);
      ASSERT_EQ(status, MatmulStatus::kOk) << MatmulStatusName(status);
      ExpectMatchesReference(x, m, k, x_stride, w, n, bias_ptr, y, y_stride,
                             "m=" + std::to_string(m) + " k=" + std::to_string(k) +
                                 " n=" + std::to_string(n) + " threads=" +
                                 std::to_string(threads));
    }
  }
}

std::string QuantCaseName(const testing::TestParamInfo<QuantCase>& info) {
  const auto [isa, path, dtype] = info.param;
  return std::string(IsaName(isa)) + (path == MatmulPath::kGemv ? "_gemv_" : "_gemm_") +
         std::string(DTypeName(dtype));
}

INSTANTIATE_TEST_SUITE_P(AllPaths, QuantMatmulTest,
                         testing::Combine(testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512,
                                                          Isa::kAmx),
                                          testing::Values(MatmulPath::kGemv, MatmulPath::kGemm),
                                          testing::ValuesIn(kFormats)),
                         QuantCaseName);

// MatmulPrecision::kBf16 on the GEMM path of AVX-512 (and AMX, whose GEMM takes the same tiles
// for quantized weights): vdpbf16ps on x rounded to bf16 and on the exactly dequantized weights
// rounded to bf16. Products of two bf16 are exact in f32, so against ref::Matmul on both rounded
// operands the error is f32 summation order, kTolerance as above; an unrounded or wrongly packed
// weight is off by far more. m spans partial x panels, n partial groups of 12 rows, k one to
// several k blocks (kc = 256), with and without bias, 1 to 3 threads.
class QuantMatmulBf16Test : public testing::TestWithParam<std::tuple<Isa, DType>> {};

float RoundedToBf16(float v) { return Bf16ToF32(F32ToBf16(v)); }

TEST_P(QuantMatmulBf16Test, MatchesRoundedReference) {
  const auto [isa, dtype] = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " is not supported by this CPU";
  const MatmulOptions options{MatmulPrecision::kBf16, MatmulPath::kGemm, isa};
  const int64_t block = TraitsOf(dtype).block_elems;
  std::mt19937 rng(static_cast<uint32_t>(300 + static_cast<int>(dtype)));
  int index = 0;
  for (int64_t m : {17, 64, 130}) {
    for (int64_t blocks : {1, 3, 9, 17}) {
      ++index;
      const int64_t k = blocks * block;
      const int64_t n = kNs[index % std::size(kNs)] + 12;
      const int threads = 1 + index % 3;
      const int64_t x_stride = k + (index % 2 ? 5 : 0);
      const std::vector<float> x = RandomFloats((m - 1) * x_stride + k, rng);
      const QuantWeight w = MakeQuantWeight(dtype, n, k, rng);
      const std::vector<float> bias = RandomFloats(n, rng);
      const float* bias_ptr = index % 2 == 0 ? bias.data() : nullptr;
      std::vector<float> y(static_cast<size_t>(m * n), std::nanf(""));
      std::vector<uint8_t> ws(MatmulWorkspaceBytes(m, k, threads, options));
      const MatmulStatus status = Matmul({x.data(), m, k, x_stride},
                                         {w.data, dtype, n, bias_ptr, y.data(), n},
                                         Pool(threads), ws.data(), ws.size(), options);
      ASSERT_EQ(status, MatmulStatus::kOk) << MatmulStatusName(status);
      std::vector<float> x_rounded = x;
      for (float& v : x_rounded) v = RoundedToBf16(v);
      QuantWeight rounded;
      rounded.dtype = dtype;
      rounded.dequantized = w.dequantized;
      for (float& v : rounded.dequantized) v = RoundedToBf16(v);
      ExpectMatchesReference(x_rounded, m, k, x_stride, rounded, n, bias_ptr, y, n,
                             "m=" + std::to_string(m) + " k=" + std::to_string(k) +
                                 " n=" + std::to_string(n) + " threads=" +
                                 std::to_string(threads));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Bf16Tiles, QuantMatmulBf16Test,
    testing::Combine(testing::Values(Isa::kAvx512, Isa::kAmx), testing::ValuesIn(kFormats)),
    [](const testing::TestParamInfo<std::tuple<Isa, DType>>& info) {
      return std::string(IsaName(std::get<0>(info.param))) + "_" +
             std::string(DTypeName(std::get<1>(info.param)));
    });

class QuantMatmulIsaTest : public testing::TestWithParam<Isa> {};

// One group sharing x whose projections mix formats, as q/k/v and gate/up of a Q4_K_M file do
// (and a float weight among them), on both paths and the automatic choice.
TEST_P(QuantMatmulIsaTest, GroupMixesFormats) {
  const Isa isa = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " is not supported by this CPU";
  std::mt19937 rng(5);
  const int64_t k = 512;
  const DType mixes[][3] = {{DType::kQ4_K, DType::kQ6_K, DType::kQ6_K},
                            {DType::kQ8_0, DType::kQ5_K, DType::kQ4_0},
                            {DType::kQ4_1, DType::kF32, DType::kQ4_K}};
  const int64_t ns[3] = {67, 16, 33};
  for (MatmulPath path : {MatmulPath::kAuto, MatmulPath::kGemv, MatmulPath::kGemm}) {
    const MatmulOptions options{MatmulPrecision::kHighest, path, isa};
    for (const auto& mix : mixes) {
      for (int64_t m : {1, 4, 40}) {
        for (int threads : {1, 2, 3}) {
          const std::vector<float> x = RandomFloats(m * k, rng);
          std::vector<QuantWeight> weights;
          std::vector<std::vector<float>> biases, ys;
          std::vector<MatmulProjection> projections;
          for (int p = 0; p < 3; ++p) {
            if (mix[p] == DType::kF32) {
              // A float weight: its "dequantized" form is itself.
              QuantWeight w;
              w.dtype = DType::kF32;
              w.dequantized = RandomFloats(ns[p] * k, rng);
              weights.push_back(std::move(w));
            } else {
              weights.push_back(MakeQuantWeight(mix[p], ns[p], k, rng));
            }
            biases.push_back(RandomFloats(ns[p], rng));
            ys.emplace_back(static_cast<size_t>(m * ns[p]), std::nanf(""));
          }
          for (int p = 0; p < 3; ++p) {
            const void* data = weights[p].dtype == DType::kF32
                                   ? static_cast<const void*>(weights[p].dequantized.data())
                                   : weights[p].data;
            projections.push_back({data, mix[p], ns[p], p == 1 ? nullptr : biases[p].data(),
                                   ys[p].data(), ns[p]});
          }
          std::vector<uint8_t> ws(MatmulWorkspaceBytes(m, k, threads, options));
          ASSERT_EQ(MatmulGroup({x.data(), m, k, k}, projections, Pool(threads), ws.data(),
                                ws.size(), options),
                    MatmulStatus::kOk);
          for (int p = 0; p < 3; ++p) {
            ExpectMatchesReference(x, m, k, k, weights[p], ns[p], projections[p].bias, ys[p],
                                   ns[p],
                                   std::string(DTypeName(mix[p])) + " in a group, m=" +
                                       std::to_string(m) + " threads=" + std::to_string(threads));
          }
        }
      }
    }
  }
}

// Weights made by the reference quantizer from smooth data (the usual case, as opposed to the
// random bytes above), through the automatic path choice at decode and prefill sizes.
TEST_P(QuantMatmulIsaTest, QuantizedFromFloats) {
  const Isa isa = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " is not supported by this CPU";
  const MatmulOptions options{MatmulPrecision::kHighest, MatmulPath::kAuto, isa};
  std::mt19937 rng(17);
  const int64_t n = 19, k = 768;
  for (DType dtype : kFormats) {
    const std::vector<float> source = RandomFloats(n * k, rng);
    QuantWeight w;
    w.dtype = dtype;
    const int64_t row_bytes = DTypeRowBytes(dtype, k);
    w.storage.resize(static_cast<size_t>(n * row_bytes));
    w.data = w.storage.data();
    w.dequantized.resize(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j) {
      ref::QuantizeRow(dtype, source.data() + j * k, k, w.storage.data() + j * row_bytes);
      ref::DequantizeRow(dtype, w.data + j * row_bytes, k, w.dequantized.data() + j * k);
    }
    for (int64_t m : {1, 3, 100}) {
      const std::vector<float> x = RandomFloats(m * k, rng);
      std::vector<float> y(static_cast<size_t>(m * n), std::nanf(""));
      std::vector<uint8_t> ws(MatmulWorkspaceBytes(m, k, 2, options));
      ASSERT_EQ(Matmul({x.data(), m, k, k}, {w.data, dtype, n, nullptr, y.data(), n}, Pool(2),
                       ws.data(), ws.size(), options),
                MatmulStatus::kOk);
      ExpectMatchesReference(x, m, k, k, w, n, nullptr, y, n,
                             std::string(DTypeName(dtype)) + " m=" + std::to_string(m));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, QuantMatmulIsaTest,
                         testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                         [](const testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

// ---- int8 activations (QuantActivations::kInt8) ----

// x as the int8 GEMV quantizes it (matmul.h): per block of 32 (q8_0, q4_0, q4_1) or 256 (the
// k-quants) elements, d = max|x| / 127 and q = round_half_even(x * (1 / d)); returns d * q, the
// x that the integer arithmetic multiplies exactly, and per element the bound d / 2 of its error.
struct QuantizedX {
  std::vector<float> value;
  std::vector<float> half_step;
};
QuantizedX QuantizeXLikeKernel(const std::vector<float>& x, int64_t m, int64_t k, int64_t stride,
                               DType weight_dtype) {
  const int64_t block = TraitsOf(weight_dtype).block_elems == 32 ? 32 : 256;
  QuantizedX out;
  out.value.resize(static_cast<size_t>(m * k));
  out.half_step.resize(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < k; b += block) {
      const float* xb = x.data() + i * stride + b;
      float amax = 0.0f;
      for (int64_t l = 0; l < block; ++l) amax = std::max(amax, std::fabs(xb[l]));
      const float d = amax / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      for (int64_t l = 0; l < block; ++l) {
        const float q = std::nearbyint(xb[l] * inv);
        out.value[i * k + b + l] = d * q;
        out.half_step[i * k + b + l] = d / 2;
      }
    }
  }
  return out;
}

// y of the int8 GEMV against two references:
//   exact: the dequantized weights times the quantized x (the kernel's integer sums are exact, so
//     only f32 rounding differs: 1e-5 of sum |w * x_q|); a wrong nibble, scale, min or x rounding
//     is of the order of a whole term, far outside it;
//   f32: DequantizeRow + ref::Matmul with the x quantization bound as tolerance,
//     |y - y_f32| <= sum_k |w| * d_block(x) / 2 (d / 2 = max|x| / 254 per element of the block).
void ExpectInt8Matches(const std::vector<float>& x, int64_t m, int64_t k, int64_t x_stride,
                       const QuantWeight& w, int64_t n, const float* bias,
                       const std::vector<float>& y, int64_t y_stride, const std::string& what) {
  const QuantizedX xq = QuantizeXLikeKernel(x, m, k, x_stride, w.dtype);
  int failures = 0;
  for (int64_t i = 0; i < m && failures < 5; ++i) {
    for (int64_t j = 0; j < n && failures < 5; ++j) {
      double exact = bias != nullptr ? bias[j] : 0.0, exact_scale = std::fabs(exact);
      double f32 = exact, bound = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double wv = w.dequantized[j * k + kk];
        exact += wv * xq.value[i * k + kk];
        exact_scale += std::fabs(wv * xq.value[i * k + kk]);
        f32 += wv * x[i * x_stride + kk];
        bound += std::fabs(wv) * xq.half_step[i * k + kk];
      }
      const double got = y[i * y_stride + j];
      if (!(std::fabs(got - exact) <= 1e-5 * exact_scale + 1e-30)) {
        ADD_FAILURE() << what << ": y[" << i << ", " << j << "] = " << got << ", int8 reference "
                      << exact << " (scale " << exact_scale << ")";
        ++failures;
      }
      if (!(std::fabs(got - f32) <= bound * (1 + 1e-4) + 1e-5 * exact_scale + 1e-30)) {
        ADD_FAILURE() << what << ": y[" << i << ", " << j << "] = " << got << ", f32 reference "
                      << f32 << " beyond the x quantization bound " << bound;
        ++failures;
      }
    }
  }
}

using Int8Case = std::tuple<Isa, DType>;
class QuantMatmulInt8Test : public testing::TestWithParam<Int8Case> {};

// The int8 GEMV at every m it serves (and forced past the automatic limit), odd n, strides,
// bias, 1 to 3 threads. The scalar level ignores the setting: f32 results.
TEST_P(QuantMatmulInt8Test, MatchesInt8ArithmeticAndQuantizationBound) {
  const auto [isa, dtype] = GetParam();
  if (!IsaSupported(isa)) GTEST_SKIP() << IsaName(isa) << " is not supported by this CPU";
  const MatmulOptions options{MatmulPrecision::kHighest, MatmulPath::kGemv, isa,
                              QuantActivations::kInt8};
  const int64_t block = TraitsOf(dtype).block_elems;
  std::mt19937 rng(static_cast<uint32_t>(300 + static_cast<int>(dtype)));
  int index = 0;
  for (int64_t m : {1, 2, 3, 4, 5, 8, 13}) {
    for (int64_t blocks : {1, 2, 9}) {
      ++index;
      const int64_t k = blocks * block;
      const int64_t n = kNs[index % std::size(kNs)];
      const int threads = 1 + index % 3;
      const int64_t x_stride = k + (index % 2 ? 5 : 0);
      const int64_t y_stride = n + (index % 3 ? 3 : 0);
      std::vector<float> x = RandomFloats((m - 1) * x_stride + k, rng);
      if (index % 4 == 0) std::fill(x.begin(), x.begin() + block, 0.0f);  // an all-zero block
      const QuantWeight w = MakeQuantWeight(dtype, n, k, rng);
      const std::vector<float> bias = RandomFloats(n, rng);
      const float* bias_ptr = index % 2 == 0 ? bias.data() : nullptr;
      std::vector<float> y(static_cast<size_t>((m - 1) * y_stride + n), std::nanf(""));
      std::vector<uint8_t> ws(MatmulWorkspaceBytes(m, k, threads, options));
      const MatmulStatus status =
          Matmul({x.data(), m, k, x_stride}, {w.data, dtype, n, bias_ptr, y.data(), y_stride},
                 Pool(threads), ws.data(), ws.size(), options);
      ASSERT_EQ(status, MatmulStatus::kOk) << MatmulStatusName(status);
      const std::string what = "m=" + std::to_string(m) + " k=" + std::to_string(k) +
                               " n=" + std::to_string(n) + " threads=" + std::to_string(threads);
      if (isa == Isa::kScalar) {
        ExpectMatchesReference(x, m, k, x_stride, w, n, bias_ptr, y, y_stride, what);
      } else {
        ExpectInt8Matches(x, m, k, x_stride, w, n, bias_ptr, y, y_stride, what);
      }
    }
  }
}

std::string Int8CaseName(const testing::TestParamInfo<Int8Case>& info) {
  return std::string(IsaName(std::get<0>(info.param))) + "_" +
         std::string(DTypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(AllIsas, QuantMatmulInt8Test,
                         testing::Combine(testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512,
                                                          Isa::kAmx),
                                          testing::ValuesIn(kFormats)),
                         Int8CaseName);

// A Q4_K_M-like group with a float weight in it, int8 activations, automatic path: the quantized
// weights take the int8 kernels, the float one stays exact.
TEST_P(QuantMatmulIsaTest, Int8GroupWithFloatWeight) {
  const Isa isa = GetParam();
  if (!IsaSupported(isa) || isa == Isa::kScalar) GTEST_SKIP();
  const MatmulOptions options{MatmulPrecision::kHighest, MatmulPath::kAuto, isa,
                              QuantActivations::kInt8};
  std::mt19937 rng(9);
  const int64_t k = 512, m = 2;
  const DType mix[3] = {DType::kQ4_K, DType::kF32, DType::kQ6_K};
  const int64_t ns[3] = {33, 16, 9};
  const std::vector<float> x = RandomFloats(m * k, rng);
  std::vector<QuantWeight> weights;
  std::vector<std::vector<float>> ys;
  std::vector<MatmulProjection> projections;
  for (int p = 0; p < 3; ++p) {
    if (mix[p] == DType::kF32) {
      QuantWeight w;
      w.dtype = DType::kF32;
      w.dequantized = RandomFloats(ns[p] * k, rng);
      weights.push_back(std::move(w));
    } else {
      weights.push_back(MakeQuantWeight(mix[p], ns[p], k, rng));
    }
    ys.emplace_back(static_cast<size_t>(m * ns[p]), std::nanf(""));
  }
  for (int p = 0; p < 3; ++p) {
    const void* data = mix[p] == DType::kF32
                           ? static_cast<const void*>(weights[p].dequantized.data())
                           : weights[p].data;
    projections.push_back({data, mix[p], ns[p], nullptr, ys[p].data(), ns[p]});
  }
  ASSERT_EQ(ChooseMatmulPath(m, projections, options), MatmulPath::kGemv);
  std::vector<uint8_t> ws(MatmulWorkspaceBytes(m, k, 2, options));
  ASSERT_EQ(MatmulGroup({x.data(), m, k, k}, projections, Pool(2), ws.data(), ws.size(), options),
            MatmulStatus::kOk);
  ExpectInt8Matches(x, m, k, k, weights[0], ns[0], nullptr, ys[0], ns[0], "q4_k in a group");
  ExpectMatchesReference(x, m, k, k, weights[1], ns[1], nullptr, ys[1], ns[1], "f32 in a group");
  ExpectInt8Matches(x, m, k, k, weights[2], ns[2], nullptr, ys[2], ns[2], "q6_k in a group");
}

// The error of the int8 path on realistic data, as documented in matmul.h: x ~ N(0, 1), weights
// quantized by the reference quantizer from N(0, 1/k); relative RMS of y against the f32 path.
TEST(QuantMatmulInt8ErrorTest, Int8ErrorOnRealisticData) {
  const Isa isa = SelectedIsa();
  if (isa == Isa::kScalar) GTEST_SKIP() << "the scalar level has no int8 path";
  std::mt19937 rng(23);
  const int64_t m = 4, n = 256, k = 2048;
  std::normal_distribution<float> x_dist(0.0f, 1.0f);
  std::normal_distribution<float> w_dist(0.0f, 1.0f / std::sqrt(static_cast<float>(k)));
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = x_dist(rng);
  std::vector<float> source(static_cast<size_t>(n * k));
  for (float& v : source) v = w_dist(rng);
  for (DType dtype : kFormats) {
    const int64_t row_bytes = DTypeRowBytes(dtype, k);
    std::vector<uint8_t> weight(static_cast<size_t>(n * row_bytes));
    for (int64_t j = 0; j < n; ++j) {
      ref::QuantizeRow(dtype, source.data() + j * k, k, weight.data() + j * row_bytes);
    }
    std::vector<float> y_f32(static_cast<size_t>(m * n)), y_int8(y_f32.size());
    for (QuantActivations mode : {QuantActivations::kF32, QuantActivations::kInt8}) {
      const MatmulOptions options{MatmulPrecision::kHighest, MatmulPath::kGemv, isa, mode};
      std::vector<uint8_t> ws(MatmulWorkspaceBytes(m, k, 1, options));
      float* y = mode == QuantActivations::kF32 ? y_f32.data() : y_int8.data();
      ASSERT_EQ(Matmul({x.data(), m, k, k}, {weight.data(), dtype, n, nullptr, y, n}, Pool(1),
                       ws.data(), ws.size(), options),
                MatmulStatus::kOk);
    }
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < y_f32.size(); ++i) {
      err2 += (double{y_int8[i]} - y_f32[i]) * (double{y_int8[i]} - y_f32[i]);
      ref2 += double{y_f32[i]} * y_f32[i];
    }
    const double rel = std::sqrt(err2 / ref2);
    std::cout << DTypeName(dtype) << ": int8 vs f32 relative RMS error " << rel << "\n";
    // Documented as ~0.5-0.8 %; a broken kernel is off by O(1).
    EXPECT_LT(rel, 0.012) << DTypeName(dtype);
    EXPECT_GT(rel, 0.0) << DTypeName(dtype) << ": int8 path not taken";
  }
}

// The automatic path with quantized weights uses the quantized limit, and the workspace size
// covers whichever path a group of float or quantized weights takes.
TEST(QuantMatmulPathTest, QuantizedGroupsUseTheirOwnLimit) {
  std::vector<uint8_t> weight(144);
  float y[64];
  const MatmulProjection quant[1] = {{weight.data(), DType::kQ4_K, 1, nullptr, y, 1}};
  const MatmulProjection bf16[1] = {{weight.data(), DType::kBF16, 1, nullptr, y, 1}};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    for (QuantActivations mode : {QuantActivations::kF32, QuantActivations::kInt8}) {
      const MatmulOptions options{MatmulPrecision::kHighest, MatmulPath::kAuto, isa, mode};
      const int64_t limit = MatmulQuantGemvMaxM(isa, DType::kQ4_K, mode);
      EXPECT_GE(limit, 1);
      EXPECT_EQ(ChooseMatmulPath(limit, quant, options), MatmulPath::kGemv);
      EXPECT_EQ(ChooseMatmulPath(limit + 1, quant, options), MatmulPath::kGemm);
      EXPECT_EQ(ChooseMatmulPath(limit + 1, bf16, options), ChooseMatmulPath(limit + 1, options));
      // A group takes the smallest limit of its formats.
      const MatmulProjection mixed[2] = {{weight.data(), DType::kQ8_0, 1, nullptr, y, 1},
                                         {weight.data(), DType::kQ6_K, 1, nullptr, y, 1}};
      const int64_t q8_limit = MatmulQuantGemvMaxM(isa, DType::kQ8_0, mode);
      const int64_t q6_limit = MatmulQuantGemvMaxM(isa, DType::kQ6_K, mode);
      const int64_t m_past = std::min(q8_limit, q6_limit) + 1;
      EXPECT_EQ(ChooseMatmulPath(m_past, mixed, options), MatmulPath::kGemm) << IsaName(isa);
      for (int64_t m = 1; m <= 20; ++m) {
        const size_t bytes = MatmulWorkspaceBytes(m, 4096, 2, options);
        const bool gemm = ChooseMatmulPath(m, quant, options) == MatmulPath::kGemm ||
                          ChooseMatmulPath(m, bf16, options) == MatmulPath::kGemm;
        if (gemm && isa != Isa::kScalar) {
          EXPECT_GT(bytes, 0u) << IsaName(isa) << " m=" << m;
        }
        if (mode == QuantActivations::kInt8 && isa != Isa::kScalar && !gemm) {
          EXPECT_GE(bytes, static_cast<size_t>(m) * 4096 * 2) << IsaName(isa) << " m=" << m;
        }
      }
    }
  }
}

// A quantized weight whose rows are not whole blocks of k is refused, never run.
TEST(QuantMatmulTest, RejectsKThatSplitsABlock) {
  std::vector<float> x(2 * 48);
  std::vector<float> y(2 * 4);
  std::vector<uint8_t> weight(4 * 2 * 144);
  for (DType dtype : kFormats) {
    const int64_t k = TraitsOf(dtype).block_elems + 16;
    EXPECT_EQ(Matmul({x.data(), 1, k, k}, {weight.data(), dtype, 4, nullptr, y.data(), 4},
                     Pool(1), nullptr, 0),
              MatmulStatus::kInvalidArgument)
        << DTypeName(dtype);
  }
}

// The quantized GEMVs cut each thread's share into pieces that another thread may take
// (GemvStealPieces): a row's sum does not depend on which thread ran it. Weights of 2.3 MB (q4_0)
// and 3.4 MB (q6_k), so every thread count here cuts its share into several pieces; f32 and int8
// activations, on every level this CPU runs.
TEST(QuantMatmulTest, GemvIsThreadCountInvariant) {
  const int64_t n = 4000, k = 1024;
  std::mt19937 rng(41);
  for (DType dtype : {DType::kQ4_0, DType::kQ6_K}) {
    const QuantWeight w = MakeQuantWeight(dtype, n, k, rng);
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
      if (!IsaSupported(isa)) continue;
      for (QuantActivations mode : {QuantActivations::kF32, QuantActivations::kInt8}) {
        const MatmulOptions options{MatmulPrecision::kHighest, MatmulPath::kGemv, isa, mode};
        for (int64_t m : {1, 3}) {
          const std::vector<float> x = RandomFloats(m * k, rng);
          std::vector<float> first;
          for (int threads : {1, 2, 3}) {
            std::vector<float> y(static_cast<size_t>(m * n), std::nanf(""));
            std::vector<uint8_t> ws(MatmulWorkspaceBytes(m, k, threads, options));
            ASSERT_EQ(Matmul({x.data(), m, k, k}, {w.data, dtype, n, nullptr, y.data(), n},
                             Pool(threads), ws.data(), ws.size(), options),
                      MatmulStatus::kOk);
            if (threads == 1) {
              first = y;
              continue;
            }
            ASSERT_EQ(0, std::memcmp(y.data(), first.data(), y.size() * sizeof(float)))
                << DTypeName(dtype) << " " << IsaName(isa) << " int8="
                << (mode == QuantActivations::kInt8) << " m=" << m << " threads=" << threads;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom::cpu
