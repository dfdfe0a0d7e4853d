// Parity of the CUDA sampler (kernels/cuda/sampling.h) with the CPU sampler: for every row the
// device token must equal loom::Sample's, and the device's penalised logits must equal the CPU's
// ApplyLogitProcessors output bit for bit. Covers vocabularies of 1 to 128256, random parameter
// combinations and seeds, logits with ties, -inf, NaN and +inf, top_k 1 and >= vocab, top_p 1
// and tiny, min_p up to 1, repeated and out-of-vocabulary penalty ids, the all -inf fallback,
// ties that land exactly on a top-p or draw boundary (the exact sequential path), many seeds
// on one distribution (the candidate threshold for every draw target), a CUDA graph replay, and
// the launcher's argument checks (without a device).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/sampling/device_sampling_params.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/sampler_internal.h"
#include "kernels/cuda/sampling.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::DeviceArray;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kMaxFloat = std::numeric_limits<float>::max();

// Raw device bytes (the workspace).
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) {
    LOOM_CUDA_CHECK(cudaMalloc(&data_, std::max<size_t>(bytes, 1)));
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() { cudaFree(data_); }
  void* get() { return data_; }

 private:
  void* data_ = nullptr;
};

struct RowCase {
  SamplingParams params;
  std::vector<TokenId> prompt;
  std::vector<TokenId> output;
};

std::string Describe(const RowCase& c) {
  const SamplingParams& p = c.params;
  std::ostringstream out;
  out << "T=" << p.temperature << " top_k=" << p.top_k << " top_p=" << p.top_p
      << " min_p=" << p.min_p << " rep=" << p.repetition_penalty << " freq=" << p.frequency_penalty
      << " pres=" << p.presence_penalty << " seed=" << p.seed << " prompt=" << c.prompt.size()
      << " output=" << c.output.size();
  return out.str();
}

// Bit for bit, except that any two NaNs are equal: x86 keeps a NaN input's payload (and sign)
// through the penalties' arithmetic where the GPU returns its canonical NaN.
bool SameBits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0 || (std::isnan(a) && std::isnan(b));
}

// Samples every row on the CPU and on the device (one launch) and compares tokens and the
// penalised logits. `logits` is [rows.size(), vocab].
void CheckBatch(int32_t vocab, const std::vector<float>& logits, const std::vector<RowCase>& rows,
                cudaStream_t stream = nullptr) {
  const int32_t num_rows = static_cast<int32_t>(rows.size());
  ASSERT_EQ(logits.size(), size_t(num_rows) * vocab);
  std::vector<int32_t> want(num_rows);
  std::vector<float> want_logits(logits);
  std::vector<DeviceSamplingRow> packed;
  std::vector<int32_t> penalty_ids;
  SamplerScratch scratch;
  for (int32_t r = 0; r < num_rows; ++r) {
    const SamplerInput input{&rows[r].params, rows[r].prompt, rows[r].output};
    ASSERT_TRUE(DeviceSamplingSupports(rows[r].params));
    std::vector<float> row(logits.begin() + int64_t{r} * vocab,
                           logits.begin() + int64_t{r + 1} * vocab);
    want[r] = Sample(row, input, scratch).token_id.value();
    std::span<float> processed(want_logits.data() + int64_t{r} * vocab, vocab);
    sampling_internal::ApplyLogitProcessors(processed, input, scratch);
    packed.push_back(PackDeviceSamplingRow(input, &penalty_ids));
  }

  DeviceArray<float> d_logits(logits);
  DeviceArray<DeviceSamplingRow> d_rows(packed);
  DeviceArray<int32_t> d_ids(penalty_ids);
  DeviceArray<int32_t> d_out(std::vector<int32_t>(num_rows, -7));
  const size_t workspace_bytes = cuda::SampleWorkspaceBytes(num_rows, vocab);
  ASSERT_GT(workspace_bytes, 0u);
  DeviceBytes workspace(workspace_bytes);
  ASSERT_EQ(cuda::Sample(d_logits.get(), num_rows, vocab, d_rows.get(), d_ids.get(),
                         workspace.get(), workspace_bytes, d_out.get(), stream),
            cudaSuccess);
  const std::vector<int32_t> got = d_out.ToHost();
  const std::vector<float> got_logits = d_logits.ToHost();
  int mismatches = 0;
  for (int32_t r = 0; r < num_rows && mismatches < 10; ++r) {
    if (got[r] != want[r]) {
      ADD_FAILURE() << "vocab " << vocab << " row " << r << " (" << Describe(rows[r])
                    << "): device token " << got[r] << ", CPU token " << want[r];
      ++mismatches;
    }
    for (int32_t i = 0; i < vocab; ++i) {
      const size_t at = size_t(r) * vocab + i;
      if (!SameBits(got_logits[at], want_logits[at])) {
        ADD_FAILURE() << "vocab " << vocab << " row " << r << " (" << Describe(rows[r])
                      << "): penalised logit " << i << " is " << got_logits[at] << ", CPU "
                      << want_logits[at];
        ++mismatches;
        break;
      }
    }
  }
}

constexpr int kNumKinds = 9;

// Logits of one row, of the kinds a sampler meets.
std::vector<float> MakeLogits(int32_t vocab, int kind, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<float> x(vocab);
  const float sigma = kind == 1 ? 3.0f : kind == 6 ? 2.0f : 1.5f;
  for (float& v : x) v = sigma * normal(rng);
  switch (kind) {
    case 0:  // a few dominant tokens
      for (int i = 0; i < 5; ++i) x[token(rng)] += 10.0f;
      break;
    case 3:  // heavy ties
      for (float& v : x) v = std::round(v * 2.0f) / 2.0f;
      break;
    case 4:  // masked padding and a NaN; token 0 stays finite
      for (int32_t i = std::max(1, vocab * 3 / 4); i < vocab; ++i) x[i] = -kInf;
      if (vocab > 1) x[1 + token(rng) % (vocab - 1)] = kNaN;
      break;
    case 5:  // all equal
      std::fill(x.begin(), x.end(), 0.25f);
      break;
    case 6:  // language-model-like: one or two tokens far ahead of a long tail
      x[token(rng)] += 18.0f;
      x[token(rng)] += 16.0f;
      break;
    case 7:  // special values
      x[token(rng)] = kInf;
      x[token(rng)] = kNaN;
      x[token(rng)] = kMaxFloat;
      x[token(rng)] = -kMaxFloat;
      x[token(rng)] = -0.0f;
      x[token(rng)] = 0.0f;
      break;
    case 8:  // small integers: many exact ties
      for (float& v : x) v = static_cast<float>(static_cast<int>(std::round(v)) % 3);
      break;
    default:
      break;
  }
  return x;
}

template <typename T>
T Pick(std::initializer_list<T> values, std::mt19937& rng) {
  std::uniform_int_distribution<size_t> at(0, values.size() - 1);
  return *(values.begin() + at(rng));
}

// Token ids with repeats and a few outside [0, vocab).
std::vector<TokenId> RandomIds(int32_t vocab, size_t count, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> token(0, std::min(vocab - 1, 40));
  std::uniform_int_distribution<int32_t> any(0, vocab - 1);
  std::vector<TokenId> ids;
  for (size_t i = 0; i < count; ++i) {
    const int choice = static_cast<int>(i % 7);
    const int32_t id = choice == 5  ? Pick<int32_t>({-1, vocab, vocab + 3}, rng)
                       : choice < 3 ? token(rng)  // a small set: many repeats
                                    : any(rng);
    ids.push_back(TokenId(id));
  }
  return ids;
}

RowCase RandomRow(int32_t vocab, std::mt19937& rng) {
  RowCase c;
  SamplingParams& p = c.params;
  p.temperature = Pick({0.0f, 0.3f, 0.7f, 1.0f, 1.0f, 1.5f, 4.0f, 1e-20f, 1e-40f}, rng);
  p.top_k = Pick({0, 0, 1, 2, 5, 40, vocab - 1, vocab, vocab + 3}, rng);
  p.top_p = Pick({1.0f, 1.0f, 0.95f, 0.8f, 0.5f, 0.1f, 1e-6f}, rng);
  p.min_p = Pick({0.0f, 0.0f, 0.0f, 0.01f, 0.1f, 0.5f, 1.0f}, rng);
  p.repetition_penalty = Pick({1.0f, 1.0f, 1.2f, 0.8f}, rng);
  p.frequency_penalty = Pick({0.0f, 0.0f, 0.5f, -1.0f}, rng);
  p.presence_penalty = Pick({0.0f, 0.0f, 0.3f, -0.7f}, rng);
  p.seed = std::uniform_int_distribution<uint64_t>()(rng);
  c.prompt = RandomIds(vocab, Pick<size_t>({0, 3, 50, 300}, rng), rng);
  c.output = RandomIds(vocab, Pick<size_t>({0, 1, 9, 100}, rng), rng);
  return c;
}

class CudaSamplingTest : public gpu_test::GpuTest {};

TEST_F(CudaSamplingTest, MatchesCpuOnRandomRows) {
  std::mt19937 rng(17);
  for (int32_t vocab : {1, 7, 1000, 32000, 128256}) {
    const int32_t num_rows = vocab > 100000 ? 36 : 72;
    std::vector<float> logits;
    std::vector<RowCase> rows;
    for (int32_t r = 0; r < num_rows; ++r) {
      const std::vector<float> row = MakeLogits(vocab, r % kNumKinds, rng);
      logits.insert(logits.end(), row.begin(), row.end());
      rows.push_back(RandomRow(vocab, rng));
    }
    CheckBatch(vocab, logits, rows);
  }
}

// One distribution, many draws: every draw target u (and so every candidate threshold).
TEST_F(CudaSamplingTest, ManySeedsOnOneDistribution) {
  std::mt19937 rng(23);
  struct Setting {
    int32_t vocab;
    int kind;
    float temperature, top_p, min_p;
    int32_t top_k;
  };
  for (const Setting& s :
       {Setting{32000, 6, 1.0f, 1.0f, 0.0f, 0}, Setting{32000, 6, 1.0f, 0.9f, 0.0f, 0},
        Setting{32000, 0, 0.8f, 1.0f, 0.0f, 50}, Setting{32000, 6, 1.0f, 1.0f, 0.05f, 0},
        Setting{128256, 6, 1.0f, 1.0f, 0.0f, 0}, Setting{1000, 2, 2.0f, 1.0f, 0.0f, 0},
        Setting{1000, 2, 1.0f, 0.3f, 0.0f, 20}, Setting{7, 2, 1.0f, 1.0f, 0.0f, 0}}) {
    SCOPED_TRACE(testing::Message() << "vocab " << s.vocab << " kind " << s.kind);
    const std::vector<float> row = MakeLogits(s.vocab, s.kind, rng);
    const int32_t num_rows = s.vocab > 100000 ? 128 : 512;
    std::vector<float> logits;
    std::vector<RowCase> rows(num_rows);
    for (int32_t r = 0; r < num_rows; ++r) {
      logits.insert(logits.end(), row.begin(), row.end());
      rows[r].params.temperature = s.temperature;
      rows[r].params.top_p = s.top_p;
      rows[r].params.min_p = s.min_p;
      rows[r].params.top_k = s.top_k;
      rows[r].params.seed = 1000 + r / 4;
      rows[r].output.assign(r % 4, TokenId(-1));  // output index r % 4; ids ignored
    }
    CheckBatch(s.vocab, logits, rows);
  }
}

// Equal weights make cumulative sums exact integers, so top-p and draw targets land exactly on
// them: the bounded scan cannot decide and the exact path runs.
TEST_F(CudaSamplingTest, TiesOnExactBoundaries) {
  for (int32_t vocab : {2, 8, 16, 1000, 4096}) {
    std::vector<float> logits;
    std::vector<RowCase> rows;
    for (float top_p : {1.0f, 0.75f, 0.5f, 0.25f, 0.125f}) {
      for (int32_t top_k : {0, 1, 3, vocab / 2}) {
        for (uint64_t seed = 0; seed < 12; ++seed) {
          RowCase c;
          c.params.temperature = 1.0f;
          c.params.top_p = top_p;
          c.params.top_k = top_k;
          c.params.seed = seed;
          rows.push_back(c);
          for (int32_t i = 0; i < vocab; ++i) logits.push_back(i % 4 == 3 ? -1.0f : 2.0f);
        }
      }
    }
    CheckBatch(vocab, logits, rows);
  }
}

TEST_F(CudaSamplingTest, GreedyTiesNonFiniteAndFallback) {
  const int32_t vocab = 9;
  std::vector<std::vector<float>> cases = {
      {1, 3, 3, 2, -kInf, kNaN, 3, 0, 0},                      // ties to the lowest id
      {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN},  // nothing finite: token 0
      {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf},
      {-kInf, kNaN, -kInf, 5, -kInf, kInf, kInf, kNaN, 1},     // +inf: the first one
      {-kInf, -kInf, -3, -kInf, -2, -kInf, -2, -kInf, -kInf},  // pushed to -inf below
      {-0.0f, 0.0f, -0.0f, 0.0f, -1, -1, -1, -1, -1},          // -0 == +0
  };
  std::vector<float> logits;
  std::vector<RowCase> rows;
  for (float temperature : {0.0f, 1.0f}) {
    for (const auto& c : cases) {
      for (int penalised = 0; penalised < 2; ++penalised) {
        RowCase row;
        row.params.temperature = temperature;
        if (penalised) {
          // Multiplies every negative logit of tokens 2, 4 and 6 into -inf (and divides positive
          // ones into subnormals); in the fifth case nothing finite is left and the fallback
          // picks the best raw logit among them (-2, at token 4).
          row.params.repetition_penalty = 3e38f;
          row.prompt = {TokenId(4), TokenId(2), TokenId(6), TokenId(4), TokenId(99)};
        }
        rows.push_back(row);
        logits.insert(logits.end(), c.begin(), c.end());
      }
    }
  }
  CheckBatch(vocab, logits, rows);
}

TEST_F(CudaSamplingTest, PenaltiesWithRepeatedTokens) {
  std::mt19937 rng(31);
  const int32_t vocab = 1000;
  std::vector<float> logits;
  std::vector<RowCase> rows;
  for (int r = 0; r < 64; ++r) {
    const std::vector<float> row = MakeLogits(vocab, r % 3, rng);
    logits.insert(logits.end(), row.begin(), row.end());
    RowCase c;
    c.params.temperature = r % 2 == 0 ? 0.0f : 0.9f;
    c.params.seed = r;
    c.params.repetition_penalty = Pick({1.0f, 1.3f, 0.6f}, rng);
    c.params.frequency_penalty = Pick({0.0f, 0.4f, -2.0f, 2.0f}, rng);
    c.params.presence_penalty = Pick({0.0f, 1.5f, -0.3f}, rng);
    // The same few tokens many times, in both lists, and ids outside the vocabulary.
    for (int i = 0; i < 200; ++i) {
      c.output.push_back(TokenId(Pick<int32_t>({3, 3, 7, 500, -5, vocab, 999}, rng)));
      c.prompt.push_back(TokenId(Pick<int32_t>({3, 11, 12, 500, vocab + 1, 0}, rng)));
    }
    rows.push_back(c);
  }
  CheckBatch(vocab, logits, rows);
}

TEST_F(CudaSamplingTest, CapturesInACudaGraph) {
  std::mt19937 rng(37);
  const int32_t vocab = 32000, num_rows = 16;
  std::vector<float> logits;
  std::vector<RowCase> rows;
  for (int32_t r = 0; r < num_rows; ++r) {
    const std::vector<float> row = MakeLogits(vocab, r % kNumKinds, rng);
    logits.insert(logits.end(), row.begin(), row.end());
    rows.push_back(RandomRow(vocab, rng));
  }
  std::vector<DeviceSamplingRow> packed;
  std::vector<int32_t> penalty_ids;
  std::vector<int32_t> want;
  SamplerScratch scratch;
  for (int32_t r = 0; r < num_rows; ++r) {
    const SamplerInput input{&rows[r].params, rows[r].prompt, rows[r].output};
    std::vector<float> row(logits.begin() + int64_t{r} * vocab,
                           logits.begin() + int64_t{r + 1} * vocab);
    want.push_back(Sample(row, input, scratch).token_id.value());
    packed.push_back(PackDeviceSamplingRow(input, &penalty_ids));
  }
  DeviceArray<float> d_logits(logits);
  DeviceArray<DeviceSamplingRow> d_rows(packed);
  DeviceArray<int32_t> d_ids(penalty_ids);
  DeviceArray<int32_t> d_out(std::vector<int32_t>(num_rows, -7));
  const size_t workspace_bytes = cuda::SampleWorkspaceBytes(num_rows, vocab);
  DeviceBytes workspace(workspace_bytes);

  cudaStream_t stream;
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const cudaError_t launched =
      cuda::Sample(d_logits.get(), num_rows, vocab, d_rows.get(), d_ids.get(), workspace.get(),
                   workspace_bytes, d_out.get(), stream);
  LOOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ASSERT_EQ(launched, cudaSuccess);
  cudaGraphExec_t exec;
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  // Penalties are applied in place, so the replay starts from fresh logits each time.
  for (int replay = 0; replay < 2; ++replay) {
    LOOM_CUDA_CHECK(cudaMemcpy(d_logits.get(), logits.data(), logits.size() * sizeof(float),
                               cudaMemcpyHostToDevice));
    LOOM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(d_out.ToHost(), want) << "replay " << replay;
  }
  LOOM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LOOM_CUDA_CHECK(cudaGraphDestroy(graph));
  LOOM_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Argument checks happen before any CUDA call, so these run without a device.
TEST(CudaSamplingLaunch, RejectsBadArguments) {
  EXPECT_EQ(cuda::SampleWorkspaceBytes(0, 100), 0u);
  EXPECT_EQ(cuda::SampleWorkspaceBytes(4, 0), 0u);
  EXPECT_EQ(cuda::SampleWorkspaceBytes(65536, 10), 0u);
  EXPECT_EQ(cuda::SampleWorkspaceBytes(2, std::numeric_limits<int32_t>::max()), 0u);
  const size_t bytes = cuda::SampleWorkspaceBytes(4, 1000);
  EXPECT_GE(bytes, size_t{16} * 4 * 1000);
  EXPECT_LE(cuda::SampleWorkspaceBytes(4, 999), bytes);

  alignas(256) static char fake[1];  // never dereferenced: every call below is rejected first
  float* logits = reinterpret_cast<float*>(fake);
  const auto* rows = reinterpret_cast<const DeviceSamplingRow*>(fake);
  int32_t* out = reinterpret_cast<int32_t*>(fake);
  EXPECT_EQ(cuda::Sample(logits, 0, 1000, rows, nullptr, fake, 0, out, nullptr), cudaSuccess);
  EXPECT_EQ(cuda::Sample(logits, 4, 0, rows, nullptr, fake, bytes, out, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Sample(logits, -1, 1000, rows, nullptr, fake, bytes, out, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Sample(logits, 4, 1000, rows, nullptr, fake, bytes - 1, out, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Sample(logits, 4, 1000, rows, nullptr, fake + 1, bytes, out, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Sample(nullptr, 4, 1000, rows, nullptr, fake, bytes, out, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Sample(logits, 4, 1000, rows, nullptr, fake, bytes, nullptr, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace loom
