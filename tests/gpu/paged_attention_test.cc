// Parity of the CUDA paged attention with kernels/ref on ragged batches that mix prefill chunks
// and decode rows: MHA and GQA, head sizes from 1 to 256 (odd ones included), block sizes 1, 5
// and 16, block tables in shuffled order, f32/bf16/f16 caches, sliding windows, single-token
// sequences and long contexts. Tolerance: 2e-5 relative (the kernel sums in another order).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/paged_attention.h"
#include "kernels/ref/ops_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::AsDType;
using gpu_test::DeviceArray;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

struct AttentionCase {
  std::vector<int32_t> seq_lens;    // per sequence: positions in the cache
  std::vector<int32_t> query_lens;  // per sequence: its last positions that are query rows
  int32_t num_heads, num_kv_heads, head_dim, block_size;
  DType dtype;
  int32_t sliding_window = 0;
};

void CheckAttention(const AttentionCase& c, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "heads=" << c.num_heads << "/" << c.num_kv_heads
                                  << " head_dim=" << c.head_dim << " block=" << c.block_size
                                  << " dtype=" << DTypeName(c.dtype)
                                  << " window=" << c.sliding_window);
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
    for (int32_t b = 0; b * c.block_size < c.seq_lens[s]; ++b) tables[s * max_blocks + b] = ids[next++];
  }
  const size_t cache_elems = size_t(num_blocks) * c.num_kv_heads * c.block_size * c.head_dim;
  const std::vector<uint8_t> k_cache = AsDType(RandomFloats(cache_elems, rng), c.dtype);
  const std::vector<uint8_t> v_cache = AsDType(RandomFloats(cache_elems, rng), c.dtype);
  const int64_t row = int64_t{c.num_heads} * c.head_dim;
  const std::vector<float> q = RandomFloats(num_tokens * row, rng);

  PagedAttentionArgs args;
  args.q_stride = row;
  args.out_stride = row;
  args.num_heads = c.num_heads;
  args.num_seqs = num_seqs;
  args.max_blocks_per_seq = max_blocks;
  args.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  args.sliding_window = c.sliding_window;
  std::vector<float> want(num_tokens * row);
  args.q = q.data();
  args.out = want.data();
  args.cache = {const_cast<uint8_t*>(k_cache.data()), const_cast<uint8_t*>(v_cache.data()),
                c.dtype, num_blocks, c.num_kv_heads, c.block_size, c.head_dim};
  args.query_start = query_start.data();
  args.seq_lens = c.seq_lens.data();
  args.block_tables = tables.data();
  ref::PagedAttention(args);

  DeviceArray<float> d_q(q), d_out(std::vector<float>(num_tokens * row, -1.0f));
  DeviceArray<uint8_t> d_k(k_cache), d_v(v_cache);
  DeviceArray<int32_t> d_start(query_start), d_lens(c.seq_lens), d_tables(tables);
  args.q = d_q.get();
  args.out = d_out.get();
  args.cache.k = d_k.get();
  args.cache.v = d_v.get();
  args.query_start = d_start.get();
  args.seq_lens = d_lens.get();
  args.block_tables = d_tables.get();
  ASSERT_EQ(cuda::PagedAttention(args, num_tokens, nullptr), cudaSuccess);
  EXPECT_LE(MaxRelDiff(d_out.ToHost(), want), 2e-5f);
}

class CudaPagedAttentionTest : public gpu_test::GpuTest {};

TEST_F(CudaPagedAttentionTest, MixedPrefillAndDecodeMatchReference) {
  std::mt19937 rng(51);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto [heads, kv_heads] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{6, 1}}) {
      for (int32_t head_dim : {1, 7, 64, 80, 128, 256}) {
        for (int32_t block_size : {1, 5, 16}) {
          // A decode row, a prefill chunk after cached tokens, a whole prompt, a 1-token prompt.
          CheckAttention({{37, 20, 9, 1}, {1, 6, 9, 1}, heads, kv_heads, head_dim, block_size, dtype},
                         rng);
        }
      }
    }
  }
}

TEST_F(CudaPagedAttentionTest, SlidingWindow) {
  std::mt19937 rng(53);
  for (int32_t window : {1, 4, 33}) {
    CheckAttention({{50, 12}, {3, 12}, 8, 2, 64, 16, DType::kBF16, window}, rng);
  }
}

TEST_F(CudaPagedAttentionTest, LongContextDecode) {
  std::mt19937 rng(57);
  CheckAttention({{4100, 8191}, {1, 1}, 32, 8, 128, 16, DType::kBF16}, rng);
}

TEST_F(CudaPagedAttentionTest, RefusesBadArguments) {
  PagedAttentionArgs args;
  args.num_heads = 6;
  args.num_seqs = 1;
  args.cache.num_kv_heads = 4;  // 6 is not a multiple of 4
  args.cache.head_dim = 64;
  args.cache.block_size = 16;
  EXPECT_EQ(cuda::PagedAttention(args, 1, nullptr), cudaErrorInvalidValue);
  args.num_heads = 8;
  args.cache.head_dim = 257;
  EXPECT_EQ(cuda::PagedAttention(args, 1, nullptr), cudaErrorInvalidValue);
  args.cache.head_dim = 64;
  EXPECT_EQ(cuda::PagedAttention(args, 0, nullptr), cudaSuccess);  // nothing to do
}

}  // namespace
}  // namespace loom
