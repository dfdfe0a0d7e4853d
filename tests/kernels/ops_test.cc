// Parity of the CPU element-wise, RoPE, KV-write and paged-attention kernels with kernels/ref,
// on random inputs of odd sizes, for every instruction-set level this machine runs (all of them
// in the "emulated:" tests, built against the ISA-emulation kernels, tests/CMakeLists.txt).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/quant_ref.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Stores f32 values as `dtype` bytes (bf16/f16 rounded), so ref and cpu see identical weights.
std::vector<uint8_t> AsDType(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> out(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) StoreFromF32(out.data(), dtype, i, values[i]);
  return out;
}

// Largest |a - b| relative to max(1, max |b|).
using test::MaxRelDiff;

class ElementwiseTest : public ::testing::TestWithParam<int> {};

TEST_P(ElementwiseTest, MatchesReference) {
  cpu::ThreadPool pool(GetParam());
  std::mt19937 rng(7);
  for (int32_t dim : {1, 7, 8, 33, 64, 257}) {
    for (int32_t rows : {1, 3, 17, 300}) {
      for (DType wdtype : {DType::kF32, DType::kBF16, DType::kF16}) {
        SCOPED_TRACE(testing::Message() << "dim=" << dim << " rows=" << rows
                                        << " dtype=" << DTypeName(wdtype));
        const auto x = RandomFloats(size_t(rows) * dim, rng);
        const auto w = AsDType(RandomFloats(dim, rng), wdtype);
        std::vector<float> got(x.size()), want(x.size());
        cpu::RmsNorm(pool, x.data(), dim, rows, dim, w.data(), wdtype, 1e-5f, got.data(), dim);
        ref::RmsNorm(x.data(), dim, rows, dim, w.data(), wdtype, 1e-5f, want.data(), dim);
        EXPECT_LT(MaxRelDiff(got, want), 2e-6f) << "RmsNorm";

        auto res_got = x, res_want = x;
        const auto delta = RandomFloats(x.size(), rng);
        cpu::AddRmsNorm(pool, res_got.data(), delta.data(), rows, dim, w.data(), wdtype, 1e-6f,
                        got.data());
        ref::AddRmsNorm(res_want.data(), delta.data(), rows, dim, w.data(), wdtype, 1e-6f,
                        want.data());
        EXPECT_EQ(res_got, res_want) << "AddRmsNorm residual";
        EXPECT_LT(MaxRelDiff(got, want), 2e-6f) << "AddRmsNorm";

        const auto up = RandomFloats(x.size(), rng, 3.0f);
        const auto gate = RandomFloats(x.size(), rng, 6.0f);
        cpu::SiluMul(pool, gate.data(), dim, up.data(), dim, rows, dim, got.data(), dim);
        ref::SiluMul(gate.data(), dim, up.data(), dim, rows, dim, want.data(), dim);
        EXPECT_LT(MaxRelDiff(got, want), 1e-6f) << "SiluMul";
      }
    }
  }
}

TEST_P(ElementwiseTest, EmbeddingAndRope) {
  cpu::ThreadPool pool(GetParam());
  std::mt19937 rng(11);
  const int32_t vocab = 50;
  for (int32_t dim : {2, 16, 40, 128}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      const auto table = AsDType(RandomFloats(size_t(vocab) * dim, rng), dtype);
      std::vector<int32_t> ids = {0, 49, 3, 3, 17};
      std::vector<float> got(ids.size() * dim), want(ids.size() * dim);
      cpu::Embedding(pool, ids.data(), ids.size(), table.data(), dtype, dim, got.data());
      ref::Embedding(ids.data(), ids.size(), table.data(), dtype, dim, want.data());
      EXPECT_EQ(got, want);
    }
    for (int32_t heads : {1, 3, 8}) {
      const int32_t tokens = 9;
      const int64_t stride = int64_t{heads} * dim + 5;  // padded rows
      auto x_got = RandomFloats(tokens * stride, rng);
      auto x_want = x_got;
      const auto cos = RandomFloats(tokens * dim / 2, rng);
      const auto sin = RandomFloats(tokens * dim / 2, rng);
      cpu::Rope(pool, x_got.data(), stride, tokens, heads, dim, dim, cos.data(), sin.data());
      ref::Rope(x_want.data(), stride, tokens, heads, dim, dim, cos.data(), sin.data());
      EXPECT_LT(MaxRelDiff(x_got, x_want), 1e-6f) << "Rope dim=" << dim << " heads=" << heads;
    }
  }
}

// A block-quantized table: each looked-up row equals ref::DequantizeRow of that row, bit for bit.
TEST_P(ElementwiseTest, EmbeddingOfQuantizedTable) {
  cpu::ThreadPool pool(GetParam());
  std::mt19937 rng(12);
  const int32_t vocab = 40;
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K,
                      DType::kQ6_K}) {
    for (int32_t dim : {256, 512}) {
      const int64_t row_bytes = DTypeRowBytes(dtype, dim);
      const std::vector<float> source = RandomFloats(size_t(vocab) * dim, rng);
      std::vector<uint8_t> table(static_cast<size_t>(vocab * row_bytes));
      for (int32_t v = 0; v < vocab; ++v) {
        ref::QuantizeRow(dtype, source.data() + int64_t{v} * dim, dim, table.data() + v * row_bytes);
      }
      // Enough tokens that the rows are split over the threads.
      std::vector<int32_t> ids;
      for (int32_t t = 0; t < 70; ++t) ids.push_back((t * 7 + 3) % vocab);
      std::vector<float> got(ids.size() * dim), want(ids.size() * dim);
      cpu::Embedding(pool, ids.data(), ids.size(), table.data(), dtype, dim, got.data());
      for (size_t t = 0; t < ids.size(); ++t) {
        ref::DequantizeRow(dtype, table.data() + ids[t] * row_bytes, dim, want.data() + t * dim);
      }
      EXPECT_EQ(got, want) << DTypeName(dtype) << " dim=" << dim;
      std::vector<float> via_ref(ids.size() * dim);
      ref::Embedding(ids.data(), ids.size(), table.data(), dtype, dim, via_ref.data());
      EXPECT_EQ(via_ref, want) << DTypeName(dtype) << " dim=" << dim;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, ElementwiseTest, ::testing::Values(1, 2, 3));

// A ragged batch: per sequence, the number of cached tokens before the step and the number of
// query rows in it.
struct AttentionCase {
  int32_t num_heads, num_kv_heads, head_dim, block_size, sliding_window;
  DType kv_dtype;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (context before, new rows)
};

// Printed in test names (gtest and ctest show the parameter): heads/KV heads/head_dim/block.
void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.num_heads << "/" << c.num_kv_heads << "/" << c.head_dim << "/" << c.block_size;
}

class AttentionTest : public ::testing::TestWithParam<std::tuple<AttentionCase, int>> {};

TEST_P(AttentionTest, MatchesReference) {
  const auto& [c, threads] = GetParam();
  std::mt19937 rng(123);
  const int32_t num_seqs = c.seqs.size();
  std::vector<int32_t> query_start = {0}, seq_lens;
  int32_t max_blocks = 0, total_blocks = 0;
  for (auto [before, rows] : c.seqs) {
    query_start.push_back(query_start.back() + rows);
    seq_lens.push_back(before + rows);
    max_blocks = std::max(max_blocks, (before + rows + c.block_size - 1) / c.block_size);
  }
  // Blocks are handed out in a shuffled order so tables are not the identity.
  std::vector<int32_t> tables(size_t(num_seqs) * max_blocks, -1), pool_ids;
  for (int32_t s = 0; s < num_seqs; ++s) total_blocks += (seq_lens[s] + c.block_size - 1) / c.block_size;
  for (int32_t b = 0; b < total_blocks; ++b) pool_ids.push_back(b);
  std::shuffle(pool_ids.begin(), pool_ids.end(), rng);
  int32_t next = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t b = 0; b * c.block_size < seq_lens[s]; ++b) tables[s * max_blocks + b] = pool_ids[next++];
  }
  PagedKvView cache;
  cache.dtype = c.kv_dtype;
  cache.num_blocks = total_blocks;
  cache.num_kv_heads = c.num_kv_heads;
  cache.block_size = c.block_size;
  cache.head_dim = c.head_dim;
  const size_t cache_elems = size_t(total_blocks) * cache.block_stride();
  std::vector<uint8_t> k_store(cache_elems * DTypeSize(c.kv_dtype)), v_store(k_store.size());
  cache.k = k_store.data();
  cache.v = v_store.data();
  // Fill every position of every sequence through WriteKv (cpu), checking it against ref.
  const int32_t kv_dim = c.num_kv_heads * c.head_dim;
  std::vector<int32_t> slots;
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t p = 0; p < seq_lens[s]; ++p) {
      slots.push_back(tables[s * max_blocks + p / c.block_size] * c.block_size + p % c.block_size);
    }
  }
  const auto k_rows = RandomFloats(slots.size() * kv_dim, rng);
  const auto v_rows = RandomFloats(slots.size() * kv_dim, rng);
  KvWriteArgs write{k_rows.data(), v_rows.data(), kv_dim, kv_dim, int32_t(slots.size()),
                    slots.data(), cache, KvBatchLayout{}};
  cpu::ThreadPool pool(threads);
  cpu::WriteKv(pool, write);
  std::vector<uint8_t> k_ref(k_store.size()), v_ref(v_store.size());
  write.cache.k = k_ref.data();
  write.cache.v = v_ref.data();
  ref::WriteKv(write);
  ASSERT_EQ(k_store, k_ref);
  ASSERT_EQ(v_store, v_ref);

  const int32_t num_rows = query_start.back();
  const int64_t q_stride = int64_t{c.num_heads} * c.head_dim + 3;
  const auto q = RandomFloats(size_t(num_rows) * q_stride, rng);
  PagedAttentionArgs args;
  args.q = q.data();
  args.q_stride = q_stride;
  args.num_heads = c.num_heads;
  args.cache = cache;
  args.num_seqs = num_seqs;
  args.query_start = query_start.data();
  args.seq_lens = seq_lens.data();
  args.block_tables = tables.data();
  args.max_blocks_per_seq = max_blocks;
  args.scale = 1.0f / std::sqrt(float(c.head_dim));
  args.sliding_window = c.sliding_window;
  const int64_t out_stride = int64_t{c.num_heads} * c.head_dim;
  std::vector<float> want(size_t(num_rows) * out_stride);
  args.out = want.data();
  args.out_stride = out_stride;
  ref::PagedAttention(args);
  for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (cpu::SelectedIsa() < isa) continue;
    std::vector<float> got(want.size());
    args.out = got.data();
    std::vector<uint8_t> workspace(cpu::PagedAttentionWorkspaceBytes(args, threads) + 64);
    void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(workspace.data()) + 63) & ~uintptr_t{63});
    cpu::PagedAttention(pool, args, aligned, isa);
    EXPECT_LT(MaxRelDiff(got, want), 2e-6f) << "isa=" << cpu::IsaName(isa);
  }
}

const AttentionCase kAttentionCases[] = {
    {4, 4, 16, 16, 0, DType::kF32, {{0, 1}}},                          // one token
    {4, 4, 16, 16, 0, DType::kF32, {{0, 40}, {7, 1}, {31, 1}}},        // prefill + decodes
    {8, 2, 64, 16, 0, DType::kBF16, {{0, 33}, {100, 1}, {16, 16}}},    // GQA, chunk at block edge
    {6, 2, 80, 5, 0, DType::kF16, {{3, 11}, {0, 1}, {49, 2}}},         // odd block size, head_dim
    {3, 1, 128, 32, 0, DType::kBF16, {{200, 1}, {0, 70}}},             // MQA, long context
    {4, 2, 16, 16, 16, DType::kF32, {{0, 48}, {60, 1}, {20, 9}}},      // sliding window
    {4, 2, 32, 1, 7, DType::kBF16, {{30, 3}, {0, 12}}},                // block size 1 + window
    {32, 4, 64, 16, 0, DType::kBF16, {{0, 130}, {300, 1}, {301, 1}}},  // 1B-Llama heads
    {12, 2, 64, 16, 0, DType::kBF16, {{0, 40}, {90, 1}, {17, 9}}},    // groups of 6: 4 + 2
};

// Stable, readable names: heads, KV heads, head_dim, block size, window, cache dtype, sequences
// (cached+new each), threads.
std::string AttentionCaseName(const ::testing::TestParamInfo<AttentionTest::ParamType>& info) {
  const auto& [c, threads] = info.param;
  std::string name = "h" + std::to_string(c.num_heads) + "kv" + std::to_string(c.num_kv_heads) +
                     "d" + std::to_string(c.head_dim) + "b" + std::to_string(c.block_size) + "w" +
                     std::to_string(c.sliding_window) + "_" + std::string(DTypeName(c.kv_dtype));
  for (const auto& [before, rows] : c.seqs) {
    name += "_" + std::to_string(before) + "p" + std::to_string(rows);
  }
  return name + "_t" + std::to_string(threads);
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionTest,
                         ::testing::Combine(::testing::ValuesIn(kAttentionCases),
                                            ::testing::Values(1, 2, 3)),
                         AttentionCaseName);

#if defined(LOOM_ISA_EMULATION)
// Against the emulated kernels the attention tests must reach the AVX-512 item kernel, which they
// run only when SelectedIsa() allows it (LOOM_CPU_ISA would cap it).
TEST(IsaEmulationTest, SelectsTheHighestIsa) {
  EXPECT_EQ(cpu::SelectedIsa(), cpu::Isa::kAmx);
}
#endif

TEST(ExpTest, Avx2ExpMatchesLibm) {
  // Covered indirectly by SiluMul and attention; here the extremes: no NaN from huge inputs.
  cpu::ThreadPool pool(1);
  std::vector<float> gate = {-200.0f, -90.0f, -20.0f, 0.0f, 20.0f, 90.0f, 200.0f, 1e-30f};
  std::vector<float> up(gate.size(), 1.0f), got(gate.size()), want(gate.size());
  cpu::SiluMul(pool, gate.data(), 8, up.data(), 8, 1, 8, got.data(), 8);
  ref::SiluMul(gate.data(), 8, up.data(), 8, 1, 8, want.data(), 8);
  for (size_t i = 0; i < gate.size(); ++i) {
    EXPECT_FALSE(std::isnan(got[i])) << gate[i];
    EXPECT_NEAR(got[i], want[i], 1e-6f * std::max(1.0f, std::fabs(want[i]))) << gate[i];
  }
}

}  // namespace
}  // namespace loom
