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

#include <cmath>
#include <cstdint>
#include <cstring>
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

}  // namespace
}  // namespace loom::cpu
