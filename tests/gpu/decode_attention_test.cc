// Parity of the CUDA split-KV decode attention with ref::PagedAttention on random inputs: MHA and
// GQA (groups 1, 4, 8, 16), head_dim 64/128/256, block sizes 1, 5, 16 and 32 with shuffled
// block tables, contexts 1, 2, 17, 1000 and 8192, sliding windows, strided q/out rows, bf16 and
// f16 caches, max_seq_len far above the actual lengths (most splits empty) and mixed batches
// whose prefill sequences must be left untouched (their rows hold a sentinel before and after).
// The workspace is filled with NaN bytes, so reading a partial result that was never written
// shows up as a NaN.
//
// Tolerance (largest |got - want| over max(1, max |want|)): 1e-2 for bf16, 2e-3 for f16. The
// kernel rounds q * scale * log2(e) and the softmax weights to the cache dtype (relative error up
// to 2^-8 for bf16, 2^-11 for f16) before the tensor-core products; short contexts, where one
// rounded weight moves the output most, reach about 3e-3 (bf16) and 4e-4 (f16) on these inputs.
// A wrong index or fragment layout gives errors of order 1.
//
// The split plan and the workspace bound are pure host functions: those tests run without a
// device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/decode_attention.h"
#include "kernels/ref/ops_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::AsDType;
using gpu_test::DeviceArray;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

constexpr float kSentinel = 1234.5f;

struct DecodeCase {
  std::vector<int32_t> seq_lens;    // per sequence: positions in the cache
  std::vector<int32_t> query_lens;  // per sequence: 1 is a decode row; others are skipped
  int32_t num_heads, num_kv_heads, head_dim, block_size;
  DType dtype;
  int32_t sliding_window = 0;
  int32_t max_seq_len = 0;  // 0: the longest sequence
  int32_t row_pad = 0;      // extra floats between q rows and between out rows
};

float Tolerance(DType dtype) { return dtype == DType::kBF16 ? 1e-2f : 2e-3f; }

void CheckDecode(const DecodeCase& c, std::mt19937& rng) {
  const int32_t num_seqs = static_cast<int32_t>(c.seq_lens.size());
  const int32_t max_seq_len =
      c.max_seq_len > 0 ? c.max_seq_len : *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  SCOPED_TRACE(testing::Message() << "heads=" << c.num_heads << "/" << c.num_kv_heads
                                  << " head_dim=" << c.head_dim << " block=" << c.block_size
                                  << " dtype=" << DTypeName(c.dtype) << " window="
                                  << c.sliding_window << " max_seq_len=" << max_seq_len);
  std::vector<int32_t> query_start(num_seqs + 1, 0);
  int32_t total_blocks = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    query_start[s + 1] = query_start[s] + c.query_lens[s];
    total_blocks += (c.seq_lens[s] + c.block_size - 1) / c.block_size;
  }
  const int32_t num_tokens = query_start[num_seqs];
  const int32_t max_blocks = std::max(1, (max_seq_len + c.block_size - 1) / c.block_size);
  // Every sequence gets its own blocks in shuffled order, plus a spare; unused entries are -1.
  const int32_t num_blocks = total_blocks + 1;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs) * max_blocks, -1);
  for (int32_t s = 0, next = 0; s < num_seqs; ++s) {
    for (int32_t b = 0; b * c.block_size < c.seq_lens[s]; ++b) {
      tables[static_cast<size_t>(s) * max_blocks + b] = ids[next++];
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

  const size_t workspace_bytes =
      cuda::DecodeAttentionWorkspaceBytes(num_seqs, c.num_heads, c.head_dim, max_seq_len);
  DeviceArray<float> d_q(q), d_out(std::vector<float>(num_tokens * stride, kSentinel));
  DeviceArray<uint8_t> d_k(k_cache), d_v(v_cache);
  DeviceArray<uint8_t> d_workspace(
      std::vector<uint8_t>(std::max<size_t>(workspace_bytes, 1), 0xff));  // NaN floats
  DeviceArray<int32_t> d_start(query_start), d_lens(c.seq_lens), d_tables(tables);
  args.q = d_q.get();
  args.out = d_out.get();
  args.cache.k = d_k.get();
  args.cache.v = d_v.get();
  args.query_start = d_start.get();
  args.seq_lens = d_lens.get();
  args.block_tables = d_tables.get();
  ASSERT_TRUE(cuda::DecodeAttentionSupports(args));
  ASSERT_EQ(cuda::DecodeAttention(args, max_seq_len, d_workspace.get(), workspace_bytes, nullptr),
            cudaSuccess);
  const std::vector<float> got = d_out.ToHost();

  // Decode rows against the reference; every other value (prefill rows, row padding) untouched.
  std::vector<float> got_decode, want_decode;
  int64_t touched = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = query_start[s]; t < query_start[s + 1]; ++t) {
      for (int64_t i = 0; i < stride; ++i) {
        const size_t at = static_cast<size_t>(t * stride + i);
        if (c.query_lens[s] == 1 && i < row) {
          got_decode.push_back(got[at]);
          want_decode.push_back(want[at]);
        } else if (got[at] != kSentinel) {
          ++touched;
        }
      }
    }
  }
  EXPECT_EQ(touched, 0) << "values outside the decode rows were written";
  EXPECT_LE(MaxRelDiff(got_decode, want_decode), Tolerance(c.dtype));
}

std::vector<int32_t> Ones(size_t n) { return std::vector<int32_t>(n, 1); }

class CudaDecodeAttentionTest : public gpu_test::GpuTest {};

TEST_F(CudaDecodeAttentionTest, MatchesReferenceAcrossShapes) {
  std::mt19937 rng(61);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (auto [heads, kv_heads] :
         {std::pair{4, 4}, std::pair{8, 2}, std::pair{16, 2}, std::pair{16, 1}}) {
      for (int32_t head_dim : {64, 128, 256}) {
        for (int32_t block_size : {1, 5, 16, 32}) {
          CheckDecode({{1, 2, 17, 1000}, Ones(4), heads, kv_heads, head_dim, block_size, dtype},
                      rng);
        }
      }
    }
  }
}

TEST_F(CudaDecodeAttentionTest, LongContext) {
  std::mt19937 rng(67);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int32_t block_size : {16, 5}) {
      // Llama-3-8B heads: one long sequence alone (many splits), then a mixed-length batch.
      CheckDecode({{8192}, Ones(1), 32, 8, 128, block_size, dtype}, rng);
      CheckDecode({{8192, 3000, 1}, Ones(3), 32, 8, 128, block_size, dtype}, rng);
    }
  }
}

TEST_F(CudaDecodeAttentionTest, SlidingWindow) {
  std::mt19937 rng(71);
  for (int32_t window : {1, 4, 33, 1000}) {
    for (int32_t block_size : {16, 5}) {
      CheckDecode({{1, 50, 1000, 5000}, Ones(4), 16, 4, 128, block_size, DType::kBF16, window},
                  rng);
    }
  }
  CheckDecode({{6000}, Ones(1), 8, 1, 64, 32, DType::kF16, 2048, 8192}, rng);
}

TEST_F(CudaDecodeAttentionTest, MixedBatchLeavesOtherRowsUntouched) {
  std::mt19937 rng(73);
  for (int32_t block_size : {16, 5}) {
    for (int32_t row_pad : {0, 3}) {
      // Sequences with 3, 0, 7 and 2 query rows belong to another kernel.
      CheckDecode({{100, 40, 20, 1, 7, 3000, 2},
                   {1, 3, 0, 1, 7, 1, 2},
                   8, 2, 128, block_size, DType::kBF16, 0, 0, row_pad},
                  rng);
    }
  }
}

TEST_F(CudaDecodeAttentionTest, MaxSeqLenFarAboveSeqLens) {
  std::mt19937 rng(79);
  // The split count is planned for 65536 keys; these sequences fill a few splits at most.
  CheckDecode({{1, 17, 300}, Ones(3), 8, 1, 128, 16, DType::kBF16, 0, 65536}, rng);
  CheckDecode({{1, 17, 300}, Ones(3), 4, 4, 64, 5, DType::kF16, 0, 65536}, rng);
  CheckDecode({{2}, Ones(1), 16, 1, 256, 1, DType::kBF16, 0, 32768}, rng);
}

TEST_F(CudaDecodeAttentionTest, SingleSplitWritesOutputDirectly) {
  std::mt19937 rng(83);
  // max_seq_len <= 128 always plans one split (no workspace); so does a batch that fills the GPU.
  CheckDecode({{1, 2, 17, 128}, Ones(4), 8, 2, 128, 16, DType::kBF16}, rng);
  std::vector<int32_t> lens(100);
  for (int32_t& len : lens) len = std::uniform_int_distribution<int32_t>(1, 300)(rng);
  CheckDecode({lens, Ones(lens.size()), 32, 8, 128, 16, DType::kBF16, 0, 300}, rng);
}

TEST_F(CudaDecodeAttentionTest, RefusesUnsupportedArguments) {
  PagedAttentionArgs args;
  args.num_heads = 8;
  args.num_seqs = 1;
  args.cache = {nullptr, nullptr, DType::kBF16, 1, 2, 16, 128};
  auto refused = [](const PagedAttentionArgs& a, int32_t max_seq_len = 1024) {
    return cuda::DecodeAttention(a, max_seq_len, nullptr, 0, nullptr) == cudaErrorInvalidValue;
  };
  PagedAttentionArgs bad = args;
  bad.cache.dtype = DType::kF32;
  EXPECT_TRUE(refused(bad));
  bad = args;
  bad.cache.head_dim = 80;
  EXPECT_TRUE(refused(bad));
  bad = args;
  bad.num_heads = 6;  // not a multiple of 4 kv heads
  bad.cache.num_kv_heads = 4;
  EXPECT_TRUE(refused(bad));
  bad = args;
  bad.num_heads = 64;  // group of 32
  EXPECT_TRUE(refused(bad));
  bad = args;
  bad.cache.block_size = 0;
  EXPECT_TRUE(refused(bad));
  bad = args;
  bad.cache.k = reinterpret_cast<void*>(uintptr_t{8});  // not 16-byte aligned
  EXPECT_TRUE(refused(bad));
  EXPECT_TRUE(refused(args, -1));
  // One sequence, one kv head, 32768 keys: more than one split on any device with 2+ SMs, and
  // no workspace given.
  bad = args;
  bad.num_heads = 1;
  bad.cache.num_kv_heads = 1;
  bad.cache.head_dim = 64;
  EXPECT_TRUE(refused(bad, 32768));
  bad.num_seqs = 0;  // nothing to do
  EXPECT_EQ(cuda::DecodeAttention(bad, 32768, nullptr, 0, nullptr), cudaSuccess);
}

// ---- host-only: no CUDA call ----

TEST(DecodeAttentionPlanTest, SupportsWhatTheContractSays) {
  PagedAttentionArgs args;
  args.num_heads = 32;
  args.cache = {nullptr, nullptr, DType::kBF16, 1, 8, 16, 128};
  EXPECT_TRUE(cuda::DecodeAttentionSupports(args));
  for (int32_t head_dim : {64, 256}) {
    PagedAttentionArgs other = args;
    other.cache.head_dim = head_dim;
    EXPECT_TRUE(cuda::DecodeAttentionSupports(other));
  }
  PagedAttentionArgs other = args;
  other.cache.dtype = DType::kF16;
  other.cache.block_size = 1;
  other.num_heads = 8 * cuda::kDecodeAttentionMaxGroup;
  EXPECT_TRUE(cuda::DecodeAttentionSupports(other));
  other.num_heads += 8;
  EXPECT_FALSE(cuda::DecodeAttentionSupports(other));
  other = args;
  other.cache.dtype = DType::kF32;
  EXPECT_FALSE(cuda::DecodeAttentionSupports(other));
  other = args;
  other.cache.head_dim = 96;
  EXPECT_FALSE(cuda::DecodeAttentionSupports(other));
  other = args;
  other.num_heads = 0;
  EXPECT_FALSE(cuda::DecodeAttentionSupports(other));
}

TEST(DecodeAttentionPlanTest, SplitCountAndWorkspaceBound) {
  // Short contexts and full GPUs: one split, no workspace.
  EXPECT_EQ(cuda::DecodeAttentionNumSplits(1, 8, 128, 128, 132), 1);
  EXPECT_EQ(cuda::DecodeAttentionWorkspaceBytes(1, 32, 128, 128), 0u);
  EXPECT_EQ(cuda::DecodeAttentionNumSplits(256, 8, 128, 32768, 132), 1);
  // One sequence of Llama-3-8B at 8K on 132 SMs: split until the GPU is full, at most 64.
  const int32_t splits = cuda::DecodeAttentionNumSplits(1, 8, 128, 8192, 132);
  EXPECT_GT(splits, 8);
  EXPECT_LE(splits, 64);
  EXPECT_EQ(cuda::DecodeAttentionNumSplits(1, 8, 128, 8192, 132), splits);  // deterministic
  // The workspace bound holds for every device and kv-head count.
  for (int32_t num_seqs : {1, 2, 3, 8, 64, 256, 1000}) {
    for (int32_t kv_heads : {1, 2, 8, 32}) {
      for (int32_t group : {1, 4, 8, 16}) {
        for (int32_t head_dim : {64, 128, 256}) {
          for (int32_t max_seq_len : {1, 100, 128, 129, 255, 256, 1000, 8192, 32768, 131072}) {
            for (int32_t sm_count : {1, 8, 78, 108, 132, 148, 170}) {
              const int32_t n = cuda::DecodeAttentionNumSplits(num_seqs, kv_heads, head_dim,
                                                               max_seq_len, sm_count);
              ASSERT_GE(n, 1);
              ASSERT_LE(n, 64);
              if (n == 1) continue;
              const size_t need = size_t(num_seqs) * kv_heads * group * n * (head_dim + 1) * 4;
              ASSERT_LE(need, cuda::DecodeAttentionWorkspaceBytes(num_seqs, kv_heads * group,
                                                                  head_dim, max_seq_len))
                  << num_seqs << " seqs, " << kv_heads << " kv heads, group " << group << ", "
                  << head_dim << ", max_seq_len " << max_seq_len << ", " << sm_count << " SMs";
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom
