// Parity of the CUDA KV block copy / gather / scatter (kernels/cuda/kv_blocks.h) with a host
// copy of the same bytes: every byte of the pool (and of the staging buffer) must match,
// including the blocks and staging entries nothing writes. Covers block sizes of 1 byte to a few
// KiB that are not multiples of 16, misaligned pool and staging pointers, padding between
// halves, one block, many blocks, skipped (out-of-range) ids, a copy onto itself, more items
// than the launch has CTAs, and the launchers' argument checks (without a device).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/kv_blocks.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::DeviceArray;

struct PoolCase {
  int32_t num_layers, num_blocks;
  int64_t block_bytes;
  int64_t pad;     // bytes between halves beyond num_blocks * block_bytes
  int64_t offset;  // pool and staging start this many bytes into their allocations
};

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(byte(rng));
  return out;
}

// The host-side picture of a pool: the same layout over a byte vector.
struct HostPool {
  const PoolCase& c;
  std::vector<uint8_t>& bytes;  // the allocation; the pool starts at c.offset
  int64_t half_stride() const { return c.num_blocks * c.block_bytes + c.pad; }
  uint8_t* Block(int32_t half, int32_t block) {
    return bytes.data() + c.offset + half * half_stride() + block * c.block_bytes;
  }
  bool Valid(int32_t block) const { return block >= 0 && block < c.num_blocks; }
};

int64_t AllocationBytes(const PoolCase& c) {
  return c.offset + 2 * c.num_layers * (c.num_blocks * c.block_bytes + c.pad);
}

cuda::KvBlockLayout DeviceLayout(const PoolCase& c, uint8_t* allocation) {
  cuda::KvBlockLayout layout;
  layout.base = allocation + c.offset;
  layout.num_layers = c.num_layers;
  layout.num_blocks = c.num_blocks;
  layout.block_bytes = c.block_bytes;
  layout.half_stride_bytes = c.num_blocks * c.block_bytes + c.pad;
  return layout;
}

// Copy pairs: distinct destinations that are never sources, one copy onto itself, and pairs
// with an id outside the pool (skipped).
std::vector<int32_t> MakePairs(int32_t num_blocks, std::mt19937& rng) {
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  const int32_t half = num_blocks / 2;
  std::vector<int32_t> pairs;
  std::uniform_int_distribution<int32_t> source(0, std::max(half - 1, 0));
  for (int32_t i = half; i < num_blocks - 1; ++i) {  // blocks[half..] are destinations
    pairs.push_back(blocks[source(rng)]);
    pairs.push_back(blocks[i]);
  }
  pairs.push_back(blocks[num_blocks - 1]);  // onto itself
  pairs.push_back(blocks[num_blocks - 1]);
  pairs.insert(pairs.end(), {-1, blocks[0], blocks[0], num_blocks, num_blocks + 7, -3});
  return pairs;
}

void CheckCase(const PoolCase& c, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "layers=" << c.num_layers << " blocks=" << c.num_blocks
                                  << " block_bytes=" << c.block_bytes << " pad=" << c.pad
                                  << " offset=" << c.offset);
  const int32_t num_halves = 2 * c.num_layers;
  std::vector<uint8_t> pool = RandomBytes(AllocationBytes(c), rng);
  DeviceArray<uint8_t> d_pool(pool);
  const cuda::KvBlockLayout layout = DeviceLayout(c, d_pool.get());
  HostPool host{c, pool};

  // Copy.
  const std::vector<int32_t> pairs = MakePairs(c.num_blocks, rng);
  DeviceArray<int32_t> d_pairs(pairs);
  const int32_t num_pairs = static_cast<int32_t>(pairs.size() / 2);
  ASSERT_EQ(cuda::CopyKvBlocks(layout, d_pairs.get(), num_pairs, nullptr), cudaSuccess);
  for (int32_t i = 0; i < num_pairs; ++i) {
    const int32_t from = pairs[2 * i], to = pairs[2 * i + 1];
    if (!host.Valid(from) || !host.Valid(to)) continue;
    for (int32_t h = 0; h < num_halves; ++h) {
      std::memmove(host.Block(h, to), host.Block(h, from), c.block_bytes);
    }
  }
  ASSERT_EQ(d_pool.ToHost(), pool) << "after copy";

  // Gather (ids may repeat: gathering only reads the pool).
  std::uniform_int_distribution<int32_t> any(-2, c.num_blocks + 1);
  std::vector<int32_t> ids(std::max(1, c.num_blocks * 2 / 3) + 3);
  for (int32_t& id : ids) id = any(rng);
  const int32_t num_items = static_cast<int32_t>(ids.size());
  const int64_t staging_bytes = c.offset + int64_t{num_items} * num_halves * c.block_bytes;
  std::vector<uint8_t> staging = RandomBytes(staging_bytes, rng);
  DeviceArray<uint8_t> d_staging(staging);
  DeviceArray<int32_t> d_ids(ids);
  ASSERT_EQ(
      cuda::GatherKvBlocks(layout, d_ids.get(), num_items, d_staging.get() + c.offset, nullptr),
      cudaSuccess);
  for (int32_t i = 0; i < num_items; ++i) {
    if (!host.Valid(ids[i])) continue;
    for (int32_t h = 0; h < num_halves; ++h) {
      std::memcpy(staging.data() + c.offset + (int64_t{i} * num_halves + h) * c.block_bytes,
                  host.Block(h, ids[i]), c.block_bytes);
    }
  }
  ASSERT_EQ(d_staging.ToHost(), staging) << "after gather";

  // Scatter fresh bytes into distinct blocks (plus skipped ids).
  std::vector<int32_t> targets(c.num_blocks);
  std::iota(targets.begin(), targets.end(), 0);
  std::shuffle(targets.begin(), targets.end(), rng);
  targets.resize(std::max(1, c.num_blocks / 2));
  targets.insert(targets.begin() + targets.size() / 2, {-1, c.num_blocks});
  const int32_t num_targets = static_cast<int32_t>(targets.size());
  std::vector<uint8_t> fresh =
      RandomBytes(c.offset + int64_t{num_targets} * num_halves * c.block_bytes, rng);
  DeviceArray<uint8_t> d_fresh(fresh);
  DeviceArray<int32_t> d_targets(targets);
  ASSERT_EQ(cuda::ScatterKvBlocks(layout, d_targets.get(), num_targets, d_fresh.get() + c.offset,
                                  nullptr),
            cudaSuccess);
  for (int32_t i = 0; i < num_targets; ++i) {
    if (!host.Valid(targets[i])) continue;
    for (int32_t h = 0; h < num_halves; ++h) {
      std::memcpy(host.Block(h, targets[i]),
                  fresh.data() + c.offset + (int64_t{i} * num_halves + h) * c.block_bytes,
                  c.block_bytes);
    }
  }
  EXPECT_EQ(d_pool.ToHost(), pool) << "after scatter";
}

class CudaKvBlocksTest : public gpu_test::GpuTest {};

TEST_F(CudaKvBlocksTest, MatchesHostCopy) {
  std::mt19937 rng(53);
  for (int64_t block_bytes : {1, 3, 16, 17, 48, 256, 4104}) {
    for (int32_t num_layers : {1, 3}) {
      for (int32_t num_blocks : {1, 5, 64}) {
        CheckCase({num_layers, num_blocks, block_bytes, 0, 0}, rng);
        CheckCase({num_layers, num_blocks, block_bytes, 16, 8}, rng);
        CheckCase({num_layers, num_blocks, block_bytes, 5, 1}, rng);
      }
    }
  }
}

TEST_F(CudaKvBlocksTest, ManyItems) {
  std::mt19937 rng(59);
  CheckCase({3, 24000, 32, 0, 0}, rng);             // > 65536 (item, half) units per launch
  CheckCase({4, 40, 8 * 16 * 128 * 2, 0, 0}, rng);  // bf16 blocks: 8 heads, 16 slots, 128 dims
}

// Argument checks happen before any CUDA call, so this runs without a device.
TEST(CudaKvBlocksLaunch, RejectsBadArguments) {
  alignas(16) static int32_t ids[2] = {0, 0};
  alignas(16) static char memory[64];
  cuda::KvBlockLayout layout = cuda::MakeKvBlockLayout(memory, 2, 4, 8);
  EXPECT_EQ(layout.half_stride_bytes, 32);
  EXPECT_EQ(cuda::CopyKvBlocks(layout, ids, -1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::CopyKvBlocks(layout, ids, 0, nullptr), cudaSuccess);
  EXPECT_EQ(cuda::GatherKvBlocks(layout, ids, 1, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::ScatterKvBlocks(layout, nullptr, 1, memory, nullptr), cudaErrorInvalidValue);
  cuda::KvBlockLayout bad = layout;
  bad.num_layers = 0;
  EXPECT_EQ(cuda::CopyKvBlocks(bad, ids, 1, nullptr), cudaErrorInvalidValue);
  bad = layout;
  bad.half_stride_bytes = 31;  // halves would overlap
  EXPECT_EQ(cuda::GatherKvBlocks(bad, ids, 1, memory, nullptr), cudaErrorInvalidValue);
  bad = layout;
  bad.block_bytes = -1;
  EXPECT_EQ(cuda::ScatterKvBlocks(bad, ids, 1, memory, nullptr), cudaErrorInvalidValue);
  bad = layout;
  bad.base = nullptr;
  EXPECT_EQ(cuda::CopyKvBlocks(bad, ids, 1, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace loom
