// Parity of the CPU decode attention path (kernels/cpu/attention_decode.h) with ref::PagedAttention
// over every KV cache format (f32, bf16, f16, fp8 and the packed int8/int4/int2 formats with K per
// channel or per token), GQA groups 1/3/4/8, head_dim 64/96/128/192/256/512, block sizes 16..128,
// residual tails present, absent or missing for some sequences, sliding windows, lengths on and
// across block edges, split-KV chunks, and batches mixing decode and prefill rows; for every
// instruction-set level this machine runs (all of them in the "emulated:" build,
// tests/CMakeLists.txt).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_decode.h"
#include "kernels/ref/kv_quant_ref.h"
#include "kernels/ref/ops_ref.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

enum class Tails { kAll, kNone, kSome };  // tail slots for every sequence / none / odd ones -1

struct DecodeCase {
  int32_t num_heads, num_kv_heads, head_dim, block_size, sliding_window;
  Tails tails;
  std::vector<int32_t> seq_lens;
  std::vector<int32_t> query_lens;  // empty: one row per sequence (all decode)
  // Low-bit formats: blocks in each tail's ring; with more than one, odd sequences also start
  // their tail at block 1 (as after a one-block prefix-cache hit).
  int32_t tail_blocks = 1;
};

struct Param {
  DecodeCase c;
  DType dtype;
  bool k_per_token;
  int threads;
  // Low-bit formats: the code order of the cache. The decode path reads the CPU's; a cache in
  // another order (a CUDA pool's rows) falls back to the item kernel, which reads any.
  KvCodeOrder order = cpu::kKvCodeOrder;
};

std::vector<float> RandomFloats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

using test::MaxRelDiff;

// A paged cache holding every position of every sequence, written by the reference.
struct TestCache {
  std::vector<uint8_t> k, v;
  std::vector<uint16_t> tail_k, tail_v;
  std::vector<int32_t> tables, tail_slots, tail_first_blocks;
  int32_t max_blocks = 0;
  PagedKvView view;
};

TestCache BuildCache(const Param& p, std::mt19937& rng) {
  const DecodeCase& c = p.c;
  TestCache t;
  const int32_t num_seqs = c.seq_lens.size();
  int32_t total_blocks = 0;
  for (int32_t len : c.seq_lens) {
    t.max_blocks = std::max(t.max_blocks, (len + c.block_size - 1) / c.block_size);
    total_blocks += (len + c.block_size - 1) / c.block_size;
  }
  // Blocks are handed out in a shuffled order so tables are not the identity.
  std::vector<int32_t> ids(total_blocks);
  for (int32_t b = 0; b < total_blocks; ++b) ids[b] = b;
  std::shuffle(ids.begin(), ids.end(), rng);
  t.tables.assign(size_t(num_seqs) * t.max_blocks, -1);
  int32_t next = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t b = 0; b * c.block_size < c.seq_lens[s]; ++b) t.tables[s * t.max_blocks + b] = ids[next++];
  }
  PagedKvView& view = t.view;
  view.dtype = p.dtype;
  view.num_blocks = total_blocks;
  view.num_kv_heads = c.num_kv_heads;
  view.block_size = c.block_size;
  view.head_dim = c.head_dim;
  view.k_per_token = p.k_per_token;
  view.code_order = p.order;
  if (view.low_bit()) {
    const KvPackedLayout layout = view.packed();
    t.k.assign(size_t(total_blocks) * c.num_kv_heads * layout.k_head_bytes(), 0);
    t.v.assign(size_t(total_blocks) * c.num_kv_heads * layout.v_head_bytes(), 0);
    view.tail_blocks = c.tail_blocks;
    t.tail_k.assign(size_t(num_seqs) * view.tail_slot_stride(), 0);
    t.tail_v.assign(t.tail_k.size(), 0);
    view.tail_k = t.tail_k.data();
    view.tail_v = t.tail_v.data();
    view.num_tail_slots = num_seqs;
  } else {
    t.k.assign(size_t(total_blocks) * view.block_stride() * DTypeSize(p.dtype), 0);
    t.v.assign(t.k.size(), 0);
  }
  view.k = t.k.data();
  view.v = t.v.data();
  // Tail slots in reverse order, so slot != sequence index.
  for (int32_t s = 0; s < num_seqs; ++s) {
    t.tail_slots.push_back(num_seqs - 1 - s);
    const bool skip_first = c.tail_blocks > 1 && s % 2 == 1;
    t.tail_first_blocks.push_back(skip_first ? std::min(1, c.seq_lens[s] / c.block_size) : 0);
  }

  // Every position of every sequence written in one prefill-like write.
  const int32_t kv_dim = c.num_kv_heads * c.head_dim;
  std::vector<int32_t> query_start = {0}, slots;
  for (int32_t s = 0; s < num_seqs; ++s) {
    query_start.push_back(query_start.back() + c.seq_lens[s]);
    for (int32_t pos = 0; pos < c.seq_lens[s]; ++pos) {
      slots.push_back(t.tables[s * t.max_blocks + pos / c.block_size] * c.block_size +
                      pos % c.block_size);
    }
  }
  const auto k_rows = RandomFloats(slots.size() * kv_dim, rng);
  const auto v_rows = RandomFloats(slots.size() * kv_dim, rng);
  KvWriteArgs write{k_rows.data(), v_rows.data(), kv_dim, kv_dim, int32_t(slots.size()),
                    slots.data(), view, {}};
  write.batch = {num_seqs, query_start.data(), c.seq_lens.data(), t.tail_slots.data(),
                 t.tail_first_blocks.data()};
  ref::WriteKv(write);

  if (view.low_bit() && c.tails != Tails::kAll) {
    // A sequence without a tail slot reads its partial last block from the packed pool: pack
    // it there (rows past the sequence's end are zero).
    const KvPackedLayout layout = view.packed();
    std::vector<float> rows(size_t(c.block_size) * c.head_dim);
    for (int32_t s = 0; s < num_seqs; ++s) {
      if (c.tails == Tails::kSome && s % 2 == 0) continue;
      t.tail_slots[s] = -1;
      const int32_t filled = c.seq_lens[s] % c.block_size;
      if (filled == 0) continue;
      const int32_t b = c.seq_lens[s] / c.block_size;
      const int32_t block = t.tables[s * t.max_blocks + b];
      for (int32_t h = 0; h < c.num_kv_heads; ++h) {
        for (int32_t is_v = 0; is_v < 2; ++is_v) {
          std::fill(rows.begin(), rows.end(), 0.0f);
          const auto& src = is_v ? v_rows : k_rows;
          for (int32_t i = 0; i < filled; ++i) {
            const int64_t row = query_start[s] + int64_t{b} * c.block_size + i;
            for (int32_t d = 0; d < c.head_dim; ++d) {
              rows[size_t(i) * c.head_dim + d] = src[row * kv_dim + int64_t{h} * c.head_dim + d];
            }
          }
          uint8_t* dst = const_cast<uint8_t*>(is_v ? view.v_head_block(block, h)
                                                   : view.k_head_block(block, h));
          ref::PackHeadBlock(rows.data(), c.head_dim, layout, is_v != 0, dst);
        }
      }
    }
  }
  return t;
}

class DecodeAttentionTest : public ::testing::TestWithParam<Param> {};

TEST_P(DecodeAttentionTest, MatchesReference) {
  const Param& p = GetParam();
  const DecodeCase& c = p.c;
  std::mt19937 rng(7);
  TestCache cache = BuildCache(p, rng);
  const int32_t num_seqs = c.seq_lens.size();
  std::vector<int32_t> query_start = {0};
  for (int32_t s = 0; s < num_seqs; ++s) {
    query_start.push_back(query_start.back() + (c.query_lens.empty() ? 1 : c.query_lens[s]));
  }
  const int32_t num_rows = query_start.back();
  const int64_t q_stride = int64_t{c.num_heads} * c.head_dim + 5;
  const auto q = RandomFloats(size_t(num_rows) * q_stride, rng);
  PagedAttentionArgs args;
  args.q = q.data();
  args.q_stride = q_stride;
  args.num_heads = c.num_heads;
  args.cache = cache.view;
  args.num_seqs = num_seqs;
  args.query_start = query_start.data();
  args.seq_lens = c.seq_lens.data();
  args.block_tables = cache.tables.data();
  args.max_blocks_per_seq = cache.max_blocks;
  args.tail_slots = cache.view.low_bit() ? cache.tail_slots.data() : nullptr;
  args.tail_first_blocks = cache.view.low_bit() ? cache.tail_first_blocks.data() : nullptr;
  args.scale = 1.0f / std::sqrt(float(c.head_dim));
  args.sliding_window = c.sliding_window;
  const int64_t out_stride = int64_t{c.num_heads} * c.head_dim + 3;
  std::vector<float> want(size_t(num_rows) * out_stride, 0.0f);
  args.out = want.data();
  args.out_stride = out_stride;
  ref::PagedAttention(args);

  // The low-bit formats' own error: the reference over the same values kept in f32 (the cache
  // is built from the same random draws whatever its format).
  float format_error = 0.0f;
  if (IsLowBitKvDType(p.dtype)) {
    Param exact = p;
    exact.dtype = DType::kF32;
    std::mt19937 exact_rng(7);
    TestCache exact_cache = BuildCache(exact, exact_rng);
    PagedAttentionArgs exact_args = args;
    exact_args.cache = exact_cache.view;
    exact_args.tail_slots = nullptr;
    exact_args.tail_first_blocks = nullptr;
    std::vector<float> exact_out(want.size(), 0.0f);
    exact_args.out = exact_out.data();
    ref::PagedAttention(exact_args);
    format_error = MaxRelDiff(want, exact_out);
  }
  // Tolerance. Element formats: f32 rounding. Low-bit formats: the integer path
  // (kernels/cpu/attention_decode_int.inc) rounds q (int8 for int4/int2, int16 for int8) and
  // the V weights (uint8 for int4/int2, int16 for int8) per block. Measured over these cases, at
  // every ISA level, its largest difference from the reference is 0.12 of the format's own error
  // (int4, K per token, head_dim 128, group 8; int8: 0.033, int2: 0.028), so the bound is a
  // quarter of that error (never below f32 rounding): twice the measured worst case, and far
  // below what a wrong code order or scale gives (errors of the order of the outputs).
  const float tolerance = std::max(2e-5f, 0.25f * format_error);

  const bool decode_path = !IsLowBitKvDType(p.dtype) || p.order == cpu::kKvCodeOrder;
  ASSERT_EQ(cpu::DecodePathSupports(args), decode_path);
  cpu::ThreadPool pool(p.threads);
  int levels = 0;
  for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (cpu::SelectedIsa() < isa) continue;
    ++levels;
    std::vector<float> got(want.size(), 0.0f);
    args.out = got.data();
    std::vector<uint8_t> workspace(cpu::PagedAttentionWorkspaceBytes(args, p.threads) + 64);
    void* aligned = reinterpret_cast<void*>(
        (reinterpret_cast<uintptr_t>(workspace.data()) + 63) & ~uintptr_t{63});
    cpu::PagedAttention(pool, args, aligned, isa);
    const float diff = MaxRelDiff(got, want);
    EXPECT_LT(diff, tolerance) << "isa=" << cpu::IsaName(isa) << " format error " << format_error;
  }
  EXPECT_GT(levels, 0);
}

// The shapes, each run for every format (low-bit ones with K per channel and per token).
const DecodeCase kCases[] = {
    // SmolLM2-like group of 3; lengths before, on and after block edges; tails everywhere.
    {9, 3, 64, 16, 0, Tails::kAll, {1, 15, 16, 17, 100}, {}},
    // GQA 8, head_dim 128, a long sequence that splits into several chunks on 2+ threads.
    {8, 1, 128, 32, 0, Tails::kAll, {33, 64, 3000}, {}},
    // MHA (group 1), sliding window crossing blocks, some sequences without a tail slot.
    {4, 4, 64, 64, 40, Tails::kSome, {63, 129, 200}, {}},
    // Group 8 over 3 KV heads, block 128, no tail slots (partial blocks packed in the pool).
    {24, 3, 128, 128, 0, Tails::kNone, {130, 256, 5}, {}},
    // A window inside one block and a split sequence with a window.
    {6, 2, 64, 32, 7, Tails::kAll, {50, 2500}, {}},
    // Decode and prefill rows in one batch: only the single-row sequences take the decode path.
    {6, 2, 64, 16, 0, Tails::kAll, {40, 20, 33, 17}, {1, 5, 1, 17}},
    // Head dims of 6 and 12 units of 16 channels: the V step's runs of units are not all full
    // (4 + 2; 4 + 4 + 4 at AVX2's 8 lanes: 12 and 24 units).
    {6, 2, 96, 32, 0, Tails::kAll, {70, 300}, {}},
    {4, 1, 192, 16, 0, Tails::kNone, {50, 129}, {}},
    // Long rows: head_dim 256 and 512 (16 and 32 units of V channels; 16 and 32 K tiles of int8
    // per 16 keys).
    {4, 2, 256, 32, 0, Tails::kAll, {40, 100}, {}},
    {2, 1, 512, 16, 0, Tails::kNone, {33, 70}, {}},
    // A residual window of three blocks (the partial one and two full ones, bf16), some
    // sequences' windows starting after a prefix hit; a split sequence.
    {9, 3, 64, 16, 0, Tails::kAll, {5, 16, 40, 47, 2100}, {}, 3},
};

constexpr DType kFormats[] = {DType::kF32,    DType::kBF16,   DType::kF16,   DType::kF8E4M3,
                              DType::kKvInt8, DType::kKvInt4, DType::kKvInt2};

std::vector<Param> AllParams() {
  std::vector<Param> out;
  for (const DecodeCase& c : kCases) {
    for (DType dtype : kFormats) {
      for (bool per_token : {false, true}) {
        if (per_token && !IsLowBitKvDType(dtype)) continue;
        for (int threads : {1, 2, 3}) out.push_back({c, dtype, per_token, threads});
      }
    }
  }
  // Caches in the rows order, on the item kernel.
  for (DType dtype : {DType::kKvInt8, DType::kKvInt4, DType::kKvInt2}) {
    out.push_back({kCases[0], dtype, false, 2, KvCodeOrder::kRows});
    out.push_back({kCases[4], dtype, true, 1, KvCodeOrder::kRows});
  }
  return out;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  const DecodeCase& c = p.c;
  std::string dtype(DTypeName(p.dtype));
  std::replace(dtype.begin(), dtype.end(), '-', '_');
  std::string name = "h";
  name += std::to_string(c.num_heads);
  name += "kv";
  name += std::to_string(c.num_kv_heads);
  name += "d";
  name += std::to_string(c.head_dim);
  name += "b";
  name += std::to_string(c.block_size);
  name += "w";
  name += std::to_string(c.sliding_window);
  name += "_";
  name += dtype;
  if (IsLowBitKvDType(p.dtype)) name += p.k_per_token ? "_ktok" : "_kchan";
  if (IsLowBitKvDType(p.dtype) && p.order != cpu::kKvCodeOrder) name += "_rows";
  name += c.tails == Tails::kAll ? "_tails" : c.tails == Tails::kNone ? "_notails" : "_sometails";
  if (c.tail_blocks > 1) name += "_ring" + std::to_string(c.tail_blocks);
  for (size_t s = 0; s < c.seq_lens.size(); ++s) {
    name += "_";
    name += std::to_string(c.seq_lens[s]);
    if (!c.query_lens.empty()) {
      name += "q";
      name += std::to_string(c.query_lens[s]);
    }
  }
  name += "_t";
  name += std::to_string(p.threads);
  return name;
}

INSTANTIATE_TEST_SUITE_P(Formats, DecodeAttentionTest, ::testing::ValuesIn(AllParams()),
                         ParamName);

// The plan: one item per (sequence, KV head) on one thread; on several, a long sequence is cut
// into block-aligned chunks that cover its visible keys exactly once.
TEST(DecodePlanTest, SplitsLongSequencesAcrossThreads) {
  const std::vector<int32_t> query_start = {0, 1, 2}, seq_lens = {3000, 10};
  PagedAttentionArgs args;
  args.num_heads = 4;
  args.cache.dtype = DType::kKvInt4;
  args.cache.code_order = cpu::kKvCodeOrder;
  args.cache.num_kv_heads = 2;
  args.cache.block_size = 32;
  args.cache.head_dim = 64;
  args.num_seqs = 2;
  args.query_start = query_start.data();
  args.seq_lens = seq_lens.data();

  const cpu::DecodePlan one = cpu::PlanDecode(args, 1);
  EXPECT_EQ(one.num_items, 4);
  EXPECT_EQ(one.num_partials, 0);

  const cpu::DecodePlan two = cpu::PlanDecode(args, 2);
  EXPECT_GT(two.num_partials, 2);
  EXPECT_EQ(two.chunk_keys % args.cache.block_size, 0);
  std::vector<cpu::DecodeItem> items(two.num_items);
  cpu::FillDecodeItems(args, two, items.data());
  for (int32_t h = 0; h < 2; ++h) {
    int32_t next_key = 0, chunks = 0;
    for (const cpu::DecodeItem& item : items) {
      if (item.seq != 0 || item.kv_head != h) continue;
      EXPECT_EQ(item.key_begin, next_key);
      EXPECT_GE(item.partial, 0);
      next_key = item.key_end;
      ++chunks;
    }
    EXPECT_EQ(next_key, 3000);
    EXPECT_GT(chunks, 1);
  }
  // The short sequence stays whole.
  EXPECT_EQ(items.back().seq, 1);
  EXPECT_EQ(items.back().partial, -1);
}

// Head dims the packed layout allows but the vector loops do not (not a multiple of 32) stay on
// the item kernel; a multi-row sequence is never a decode sequence.
TEST(DecodePlanTest, EligibilityFollowsShapeAndRows) {
  const std::vector<int32_t> query_start = {0, 1, 4}, seq_lens = {10, 10};
  PagedAttentionArgs args;
  args.num_heads = 2;
  args.cache.dtype = DType::kBF16;
  args.cache.num_kv_heads = 1;
  args.cache.block_size = 16;
  args.cache.head_dim = 80;
  args.num_seqs = 2;
  args.query_start = query_start.data();
  args.seq_lens = seq_lens.data();
  EXPECT_FALSE(cpu::DecodePathSupports(args));
  args.cache.head_dim = 96;
  EXPECT_TRUE(cpu::DecodePathSupports(args));
  EXPECT_TRUE(cpu::IsDecodeSequence(args, 0));
  EXPECT_FALSE(cpu::IsDecodeSequence(args, 1));
  // Low-bit codes: only in the order the integer kernels read (the item kernel reads any).
  args.cache.dtype = DType::kKvInt4;
  args.cache.head_dim = 64;
  args.cache.code_order = KvCodeOrder::kRows;
  EXPECT_FALSE(cpu::DecodePathSupports(args));
  args.cache.code_order = KvCodeOrder::kLanes;
  EXPECT_TRUE(cpu::DecodePathSupports(args));
}

}  // namespace
}  // namespace loom
