// Parity of the CUDA tensor-core prefill attention with kernels/ref on ragged batches: MHA and
// GQA, every supported head_dim (64, 80, 96, 128, 256), block sizes 1, 5, 16 and 32 with block
// tables in shuffled order, bf16 and f16 caches, query lengths 2, 3, 63, 64, 65, 200 and 1000
// with and without cached context before the chunk, sliding windows, strided (and unaligned) q
// and out rows. Batches mix in sequences with one query row (decode) or none: those rows, and the
// padding between strided rows, must keep the sentinel the output was filled with.
//
// Tolerance: the kernel rounds q * scale and the softmax probabilities to the cache's 16-bit
// type (the reference keeps them f32), so outputs differ by rounding noise of relative size
// 2^-9 (bf16) or 2^-12 (f16) per term: 1e-2 (bf16) and 2e-3 (f16) relative to max(1, max |ref|).
// Without a CUDA device every test but the argument checks is skipped.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/prefill_attention.h"
#include "kernels/ref/ops_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::AsDType;
using gpu_test::DeviceArray;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

constexpr float kSentinel = -12345.0f;

struct PrefillCase {
  std::vector<int32_t> seq_lens;    // per sequence: positions in the cache
  std::vector<int32_t> query_lens;  // per sequence: its last positions that are query rows
  int32_t num_heads, num_kv_heads, head_dim, block_size;
  DType dtype;
  int32_t sliding_window = 0;
  int64_t row_pad = 0;  // floats between consecutive q / out rows beyond num_heads * head_dim
};

float Tolerance(DType dtype) { return dtype == DType::kBF16 ? 1e-2f : 2e-3f; }

// Rows of sequences with >= 2 query rows must match the reference; every other row, and the
// padding of strided rows, must keep the sentinel.
void CompareServedRows(const PrefillCase& c, const std::vector<int32_t>& query_start,
                       int64_t stride, int64_t row, const std::vector<float>& got,
                       const std::vector<float>& want) {
  std::vector<float> got_served, want_served;
  int64_t untouched_mismatches = 0;
  for (size_t s = 0; s < c.query_lens.size(); ++s) {
    const bool served = c.query_lens[s] >= 2;
    for (int64_t t = query_start[s]; t < query_start[s + 1]; ++t) {
      for (int64_t i = 0; i < stride; ++i) {
        const float value = got[t * stride + i];
        if (served && i < row) {
          got_served.push_back(value);
          want_served.push_back(want[t * stride + i]);
        } else if (value != kSentinel) {
          ++untouched_mismatches;
        }
      }
    }
  }
  EXPECT_EQ(untouched_mismatches, 0);
  EXPECT_LE(MaxRelDiff(got_served, want_served), Tolerance(c.dtype));
}

void CheckPrefill(const PrefillCase& c, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "heads=" << c.num_heads << "/" << c.num_kv_heads
                                  << " head_dim=" << c.head_dim << " block=" << c.block_size
                                  << " dtype=" << DTypeName(c.dtype)
                                  << " window=" << c.sliding_window << " pad=" << c.row_pad);
  const int32_t num_seqs = static_cast<int32_t>(c.seq_lens.size());
  std::vector<int32_t> query_start(num_seqs + 1, 0);
  int32_t max_blocks = 1;
  int32_t total_blocks = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    query_start[s + 1] = query_start[s] + c.query_lens[s];
    const int32_t blocks = (c.seq_lens[s] + c.block_size - 1) / c.block_size;
    max_blocks = std::max(max_blocks, blocks);
    total_blocks += blocks;
  }
  const int32_t num_tokens = query_start[num_seqs];
  // Every sequence gets its own blocks, in shuffled order, plus a spare block nobody uses.
  const int32_t num_blocks = total_blocks + 1;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs) * max_blocks, -1);
  for (int32_t s = 0, next = 0; s < num_seqs; ++s) {
    for (int32_t b = 0; b * c.block_size < c.seq_lens[s]; ++b) {
      tables[s * max_blocks + b] = ids[next++];
    }
  }
  const size_t cache_elems = size_t(num_blocks) * c.num_kv_heads * c.block_size * c.head_dim;
  const std::vector<uint8_t> k_cache = AsDType(RandomFloats(cache_elems, rng), c.dtype);
  const std::vector<uint8_t> v_cache = AsDType(RandomFloats(cache_elems, rng), c.dtype);
  const int64_t row = int64_t{c.num_heads} * c.head_dim;
  const int64_t stride = row + c.row_pad;
  const std::vector<float> q = RandomFloats(num_tokens * stride, rng);

  PagedAttentionArgs args;
  args.q_stride = stride;
  args.out_stride = stride;
  args.num_heads = c.num_heads;
  args.num_seqs = num_seqs;
  args.max_blocks_per_seq = max_blocks;
  args.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  args.sliding_window = c.sliding_window;
  std::vector<float> want(num_tokens * stride, kSentinel);
  args.q = q.data();
  args.out = want.data();
  args.cache = {const_cast<uint8_t*>(k_cache.data()), const_cast<uint8_t*>(v_cache.data()),
                c.dtype, num_blocks, c.num_kv_heads, c.block_size, c.head_dim};
  args.query_start = query_start.data();
  args.seq_lens = c.seq_lens.data();
  args.block_tables = tables.data();
  ref::PagedAttention(args);

  DeviceArray<float> d_q(q);
  DeviceArray<uint8_t> d_k(k_cache), d_v(v_cache);
  DeviceArray<int32_t> d_start(query_start), d_lens(c.seq_lens), d_tables(tables);
  args.q = d_q.get();
  args.cache.k = d_k.get();
  args.cache.v = d_v.get();
  args.query_start = d_start.get();
  args.seq_lens = d_lens.get();
  args.block_tables = d_tables.get();
  ASSERT_TRUE(cuda::PrefillAttentionSupports(args));
  // The bound the engine passes (the step's token count: one slot per tile), then the tightest
  // one (the longest query: CTAs loop over the slots).
  const int32_t max_query_len = *std::max_element(c.query_lens.begin(), c.query_lens.end());
  for (int32_t bound : {num_tokens, max_query_len}) {
    SCOPED_TRACE(testing::Message() << "max_query_len=" << bound);
    DeviceArray<float> d_out(std::vector<float>(num_tokens * stride, kSentinel));
    args.out = d_out.get();
    ASSERT_EQ(cuda::PrefillAttention(args, bound, nullptr), cudaSuccess);
    CompareServedRows(c, query_start, stride, row, d_out.ToHost(), want);
  }
}

class CudaPrefillAttentionTest : public gpu_test::GpuTest {};

// One batch per configuration: short and tile-edge chunks (2, 3, 63, 64, 65, 200 rows) with and
// without cached context, a decode row and an idle sequence (0 query rows).
TEST_F(CudaPrefillAttentionTest, HeadDimsBlockSizesAndDtypes) {
  std::mt19937 rng(61);
  const std::vector<int32_t> seq_lens = {2, 8, 63, 128, 65, 31, 17, 237};
  const std::vector<int32_t> query_lens = {2, 3, 63, 64, 65, 1, 0, 200};
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int32_t head_dim : {64, 80, 96, 128, 256}) {
      for (int32_t block_size : {1, 5, 16, 32}) {
        // GQA for even block sizes, MHA for odd ones.
        const auto [heads, kv_heads] = block_size % 2 == 0 ? std::pair{4, 2} : std::pair{2, 2};
        CheckPrefill({seq_lens, query_lens, heads, kv_heads, head_dim, block_size, dtype}, rng);
      }
    }
  }
}

// A whole 1000-token prompt and a 1000-token chunk after 1500 cached tokens.
TEST_F(CudaPrefillAttentionTest, LongPromptAndChunk) {
  std::mt19937 rng(67);
  CheckPrefill({{1000, 2500}, {1000, 1000}, 4, 1, 128, 16, DType::kBF16}, rng);
  CheckPrefill({{1000, 2500, 40}, {1000, 1000, 1}, 2, 1, 64, 5, DType::kF16}, rng);
}

TEST_F(CudaPrefillAttentionTest, SlidingWindow) {
  std::mt19937 rng(71);
  const std::vector<int32_t> seq_lens = {500, 65, 12, 300};
  const std::vector<int32_t> query_lens = {200, 65, 2, 1};
  for (int32_t window : {1, 7, 64, 100, 1000}) {
    CheckPrefill({seq_lens, query_lens, 8, 2, 128, 16, DType::kBF16, window}, rng);
  }
  CheckPrefill({seq_lens, query_lens, 4, 4, 256, 5, DType::kF16, 33}, rng);
  CheckPrefill({seq_lens, query_lens, 6, 3, 80, 32, DType::kF16, 70}, rng);
}

// q and out rows with a stride past num_heads * head_dim: 4 floats (q still 16-byte aligned) and
// 1 float (q rows unaligned: the scalar load path).
TEST_F(CudaPrefillAttentionTest, StridedRows) {
  std::mt19937 rng(73);
  for (int64_t pad : {4, 1}) {
    PrefillCase c{{70, 3, 100}, {70, 1, 33}, 4, 2, 96, 16, DType::kBF16};
    c.row_pad = pad;
    CheckPrefill(c, rng);
  }
}

// Argument checks happen before any CUDA call, so this runs without a device too.
TEST(CudaPrefillAttentionArgsTest, RefusesUnsupportedArguments) {
  alignas(16) static uint8_t cache[64];
  PagedAttentionArgs args;
  args.num_heads = 8;
  args.num_seqs = 0;
  args.cache = {cache, cache, DType::kBF16, 1, 2, 16, 128};
  EXPECT_TRUE(cuda::PrefillAttentionSupports(args));
  EXPECT_EQ(cuda::PrefillAttention(args, 100, nullptr), cudaSuccess);  // no sequence
  args.num_seqs = 3;
  EXPECT_EQ(cuda::PrefillAttention(args, 1, nullptr), cudaSuccess);  // no row to serve
  EXPECT_EQ(cuda::PrefillAttention(args, -1, nullptr), cudaErrorInvalidValue);

  auto refused = [&](auto change) {
    PagedAttentionArgs bad = args;
    change(bad);
    return !cuda::PrefillAttentionSupports(bad) &&
           cuda::PrefillAttention(bad, 100, nullptr) == cudaErrorInvalidValue;
  };
  EXPECT_TRUE(refused([](PagedAttentionArgs& a) { a.cache.dtype = DType::kF32; }));
  for (int32_t head_dim : {0, 1, 32, 72, 112, 192, 512}) {
    EXPECT_TRUE(refused([&](PagedAttentionArgs& a) { a.cache.head_dim = head_dim; }))
        << head_dim;
  }
  EXPECT_TRUE(refused([](PagedAttentionArgs& a) { a.num_heads = 7; }));  // not a multiple of 2
  EXPECT_TRUE(refused([](PagedAttentionArgs& a) { a.num_heads = 0; }));
  EXPECT_TRUE(refused([](PagedAttentionArgs& a) { a.cache.num_kv_heads = 0; }));
  EXPECT_TRUE(refused([](PagedAttentionArgs& a) { a.cache.block_size = 0; }));
  EXPECT_TRUE(refused([](PagedAttentionArgs& a) { a.sliding_window = -1; }));
  EXPECT_TRUE(refused([](PagedAttentionArgs& a) { a.num_seqs = -1; }));
  EXPECT_TRUE(refused([](PagedAttentionArgs& a) { a.cache.k = cache + 8; }));  // not 16-aligned
  EXPECT_TRUE(refused([](PagedAttentionArgs& a) { a.cache.v = cache + 2; }));
  for (int32_t head_dim : {64, 80, 96, 256}) {
    args.cache.head_dim = head_dim;
    args.cache.dtype = DType::kF16;
    EXPECT_TRUE(cuda::PrefillAttentionSupports(args)) << head_dim;
  }
}

}  // namespace
}  // namespace loom
