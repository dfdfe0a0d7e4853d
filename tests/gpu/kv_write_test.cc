// Parity of the CUDA KV-cache write with kernels/ref: every byte of both caches must match (the
// f32 -> bf16/f16/fp8 rounding is round-to-nearest-even on both sides; fp8 saturates), including the slots no token
// writes, which must keep their previous contents. Covers odd head sizes, block sizes of 1 and
// non-powers of two, skipped rows (negative slots, slots past the cache), padded and misaligned
// K/V rows, and more tokens than the launch has blocks.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/kv_write.h"
#include "kernels/ref/ops_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::DeviceArray;
using gpu_test::RandomFloats;

struct KvCase {
  int32_t num_tokens, num_kv_heads, head_dim, block_size;
  DType dtype;
  int64_t pad, offset;  // K/V rows: `offset` elements in, `pad` elements between tokens
};

// Distinct slots for the tokens in random order, every fifth row skipped with -1 and every
// seventh pointing past the cache (which the kernel skips; the reference is given -1 there).
void MakeSlots(int32_t num_tokens, int64_t num_slots, std::mt19937& rng,
               std::vector<int32_t>* kernel_slots, std::vector<int32_t>* ref_slots) {
  std::vector<int32_t> all(num_slots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  kernel_slots->assign(all.begin(), all.begin() + num_tokens);
  *ref_slots = *kernel_slots;
  for (int32_t t = 0; t < num_tokens; ++t) {
    if (t % 5 == 4) (*kernel_slots)[t] = (*ref_slots)[t] = -1;
    if (t % 7 == 6) {
      (*kernel_slots)[t] = static_cast<int32_t>(num_slots + t);
      (*ref_slots)[t] = -1;
    }
  }
}

void CheckWriteKv(const KvCase& c, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "tokens=" << c.num_tokens << " kv_heads=" << c.num_kv_heads
                                  << " head_dim=" << c.head_dim << " block_size=" << c.block_size
                                  << " dtype=" << DTypeName(c.dtype) << " pad=" << c.pad
                                  << " offset=" << c.offset);
  const int32_t num_blocks = (c.num_tokens + 3) / c.block_size + 2;  // spare slots stay untouched
  const int64_t row_len = int64_t{c.num_kv_heads} * c.head_dim;
  const int64_t stride = row_len + c.pad;
  const auto k = RandomFloats(c.offset + c.num_tokens * stride, rng);
  const auto v = RandomFloats(c.offset + c.num_tokens * stride, rng, 2.0f);
  std::vector<int32_t> kernel_slots, ref_slots;
  MakeSlots(c.num_tokens, int64_t{num_blocks} * c.block_size, rng, &kernel_slots, &ref_slots);

  const size_t cache_bytes = size_t(num_blocks) * row_len * c.block_size * DTypeSize(c.dtype);
  std::vector<uint8_t> k_cache(cache_bytes), v_cache(cache_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : k_cache) b = static_cast<uint8_t>(byte(rng));
  for (uint8_t& b : v_cache) b = static_cast<uint8_t>(byte(rng));
  DeviceArray<float> d_k(k), d_v(v);
  DeviceArray<int32_t> d_slots(kernel_slots);
  DeviceArray<uint8_t> d_k_cache(k_cache), d_v_cache(v_cache);

  KvWriteArgs args;
  args.k = k.data() + c.offset;
  args.v = v.data() + c.offset;
  args.k_stride = args.v_stride = stride;
  args.num_tokens = c.num_tokens;
  args.slot_mapping = ref_slots.data();
  args.cache = {k_cache.data(), v_cache.data(), c.dtype, num_blocks, c.num_kv_heads,
                c.block_size, c.head_dim};
  ref::WriteKv(args);

  args.k = d_k.get() + c.offset;
  args.v = d_v.get() + c.offset;
  args.slot_mapping = d_slots.get();
  args.cache.k = d_k_cache.get();
  args.cache.v = d_v_cache.get();
  ASSERT_EQ(cuda::WriteKv(args, nullptr), cudaSuccess);
  EXPECT_EQ(d_k_cache.ToHost(), k_cache) << "K cache";
  EXPECT_EQ(d_v_cache.ToHost(), v_cache) << "V cache";
}

class CudaKvWriteTest : public gpu_test::GpuTest {};

TEST_F(CudaKvWriteTest, MatchesReference) {
  std::mt19937 rng(41);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}) {
    for (int32_t kv_heads : {1, 2, 8}) {
      for (int32_t head_dim : {1, 3, 8, 64, 128}) {
        for (int32_t block_size : {1, 5, 16}) {
          CheckWriteKv({7, kv_heads, head_dim, block_size, dtype, 0, 0}, rng);
          CheckWriteKv({7, kv_heads, head_dim, block_size, dtype, 8, 4}, rng);
          CheckWriteKv({7, kv_heads, head_dim, block_size, dtype, 3, 1}, rng);
        }
      }
    }
  }
}

TEST_F(CudaKvWriteTest, ManyTokens) {
  std::mt19937 rng(43);
  CheckWriteKv({70001, 2, 8, 16, DType::kBF16, 0, 0}, rng);  // blocks loop over tokens
  CheckWriteKv({1000, 8, 128, 16, DType::kF16, 0, 0}, rng);
}

}  // namespace
}  // namespace loom
