// Parity of the CUDA kernels for compressed KV caches (fp8 E4M3 and the low-bit int8 / int4 /
// int2 formats with their bf16 residual tails) with kernels/ref:
//
// - Write: cuda::WriteKv against ref::WriteKvLowBit over several steps of a ragged batch
//   (prefill chunks that start, end or stay inside a block, decode rows that complete a block
//   from its tail, a sequence with no row in a step, a padding sequence with tail slot -1 and
//   negative slots, zero rows of mixed sign). After every step every byte of the K and V
//   regions (codes, scales, zeros, and the head blocks no sequence owns) and of both tails must
//   be equal: the kernel performs the quantizer's f32 operations in the same order, so nothing
//   is tolerated.
// - Attention: after such steps (written by the reference), the last step's query rows against
//   ref::PagedAttention: decode rows through cuda::DecodeAttentionKv (tensor cores; tolerance
//   1e-2 of the output scale for int8 and int4, whose dequantized tiles are rounded to bf16,
//   2e-2 for int2, whose dequantized values sit on coarse steps far from zero so that the bf16
//   rounding of a K tile is relatively larger (1.3e-2 measured on an H100 for K per token, head
//   dim 64), and 2e-3 for fp8, converted to f16 exactly; q and the softmax weights are rounded
//   likewise), every row
//   through cuda::PagedAttention (f32 loads; 1e-4), and the prefill rows alone through
//   cuda::PagedAttention with kSkipDecode, which must leave the decode rows untouched.
//   Contexts cross block boundaries; one sequence reads its partial block packed (tail slot -1);
//   one long context spreads over many splits.
//   Formats x K per channel / per token x head_dim 64 / 128 x block_size 32 / 64 x GQA groups
//   1 / 4 / 8; fp8 with block sizes 16 and 5 (chunks straddle blocks).
// - CudaOps::CheckKvFormat accepts exactly what these kernels serve (runs without a device).
//
// Errors are measured as in the other gpu tests: largest |got - want| over max(1, max |want|).
// A wrong code order, group parameter or tail lookup gives errors of order 1.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_ops.h"
#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/decode_attention_kv.h"
#include "kernels/cuda/kv_write.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/ref/kv_quant_ref.h"
#include "kernels/ref/ops_ref.h"
#include "tests/gpu/gpu_test_util.h"

namespace loom {
namespace {

using gpu_test::DeviceArray;
using gpu_test::MaxRelDiff;
using gpu_test::RandomFloats;

constexpr float kSentinel = 1234.5f;

struct Shape {
  DType dtype;
  bool k_per_token;
  int32_t head_dim, block_size, num_heads, num_kv_heads;
  int32_t tail_blocks = 1;  // blocks in each residual tail's ring
};

std::string Describe(const Shape& s) {
  return std::string(DTypeName(s.dtype)) + (s.k_per_token ? " K/token" : " K/channel") +
         " head_dim=" + std::to_string(s.head_dim) + " block=" + std::to_string(s.block_size) +
         " heads=" + std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) +
         " ring=" + std::to_string(s.tail_blocks);
}

// A host cache of one layer: K/V regions (packed head blocks, or fp8 elements) and the tails.
struct HostCache {
  std::vector<uint8_t> k, v;
  std::vector<uint16_t> tail_k, tail_v;
  PagedKvView view;  // pointing at the vectors above
};

HostCache MakeCache(const Shape& s, int32_t num_blocks, int32_t num_tail_slots, std::mt19937& rng,
                    bool random_bytes) {
  HostCache c;
  c.view.dtype = s.dtype;
  c.view.num_blocks = num_blocks;
  c.view.num_kv_heads = s.num_kv_heads;
  c.view.block_size = s.block_size;
  c.view.head_dim = s.head_dim;
  c.view.k_per_token = s.k_per_token;
  c.view.num_tail_slots = num_tail_slots;
  c.view.tail_blocks = s.tail_blocks;
  size_t k_bytes, v_bytes;
  if (c.view.low_bit()) {
    const KvPackedLayout layout = c.view.packed();
    k_bytes = size_t(num_blocks) * s.num_kv_heads * layout.k_head_bytes();
    v_bytes = size_t(num_blocks) * s.num_kv_heads * layout.v_head_bytes();
  } else {
    k_bytes = v_bytes = size_t(num_blocks) * c.view.block_stride() * DTypeSize(s.dtype);
  }
  const size_t tail_elems = size_t(num_tail_slots) * c.view.tail_slot_stride();
  c.k.assign(k_bytes, 0);
  c.v.assign(v_bytes, 0);
  c.tail_k.assign(tail_elems, 0);
  c.tail_v.assign(tail_elems, 0);
  if (random_bytes) {
    // Bytes no write touches must stay as they were, whatever they were.
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& b : c.k) b = static_cast<uint8_t>(byte(rng));
    for (uint8_t& b : c.v) b = static_cast<uint8_t>(byte(rng));
    for (uint16_t& x : c.tail_k) x = static_cast<uint16_t>(byte(rng) * 257);
    for (uint16_t& x : c.tail_v) x = static_cast<uint16_t>(byte(rng) * 257);
  }
  c.view.k = c.k.data();
  c.view.v = c.v.data();
  c.view.tail_k = c.tail_k.data();
  c.view.tail_v = c.tail_v.data();
  return c;
}

// Device copies of a HostCache, and a view of them.
struct DeviceCache {
  DeviceArray<uint8_t> k, v;
  DeviceArray<uint16_t> tail_k, tail_v;
  PagedKvView view;

  explicit DeviceCache(const HostCache& host)
      : k(host.k), v(host.v), tail_k(host.tail_k), tail_v(host.tail_v), view(host.view) {
    view.k = k.get();
    view.v = v.get();
    view.tail_k = tail_k.get();
    view.tail_v = tail_v.get();
  }
};

// A ragged batch run over several steps: chunks[s][step] rows of sequence s are appended in
// `step`. Sequence `padding` (or -1 for none) has tail slot -1 and negative slots.
class Scenario {
 public:
  Scenario(const Shape& shape, std::vector<std::vector<int32_t>> chunks, int32_t padding,
           std::mt19937& rng)
      : shape_(shape), chunks_(std::move(chunks)), padding_(padding) {
    const int32_t num_seqs = static_cast<int32_t>(chunks_.size());
    for (const std::vector<int32_t>& rows : chunks_) {
      const int32_t total = std::accumulate(rows.begin(), rows.end(), 0);
      blocks_per_seq_ = std::max(blocks_per_seq_, total / shape_.block_size + 1);
    }
    num_blocks_ = num_seqs * blocks_per_seq_ + 3;  // spare blocks nobody owns
    std::vector<int32_t> ids(num_blocks_);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    tables_.assign(ids.begin(), ids.begin() + num_seqs * blocks_per_seq_);
    tail_slots_.resize(num_seqs);
    std::iota(tail_slots_.begin(), tail_slots_.end(), 0);
    std::shuffle(tail_slots_.begin(), tail_slots_.end(), rng);
    if (padding_ >= 0) tail_slots_[padding_] = -1;
    num_tail_slots_ = num_seqs + 1;
    seq_lens_.assign(num_seqs, 0);
  }

  int32_t num_seqs() const { return static_cast<int32_t>(chunks_.size()); }
  int32_t num_steps() const { return static_cast<int32_t>(chunks_[0].size()); }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t blocks_per_seq() const { return blocks_per_seq_; }
  int32_t num_tail_slots() const { return num_tail_slots_; }
  const std::vector<int32_t>& tables() const { return tables_; }
  const std::vector<int32_t>& tail_slots() const { return tail_slots_; }

  // The next step's batch: query_start, seq_lens (after the step) and slot_mapping; advances.
  void NextStep(std::vector<int32_t>* query_start, std::vector<int32_t>* seq_lens,
                std::vector<int32_t>* slots) {
    query_start->assign(1, 0);
    slots->clear();
    for (int32_t s = 0; s < num_seqs(); ++s) {
      const int32_t rows = chunks_[s][step_];
      for (int32_t i = 0; i < rows; ++i) {
        const int32_t pos = seq_lens_[s] + i;
        slots->push_back(s == padding_ ? -1
                                       : tables_[s * blocks_per_seq_ + pos / shape_.block_size] *
                                                 shape_.block_size +
                                             pos % shape_.block_size);
      }
      seq_lens_[s] += rows;
      query_start->push_back(query_start->back() + rows);
    }
    *seq_lens = seq_lens_;
    ++step_;
  }

 private:
  Shape shape_;
  std::vector<std::vector<int32_t>> chunks_;
  int32_t padding_;
  int32_t blocks_per_seq_ = 1, num_blocks_ = 0, num_tail_slots_ = 0, step_ = 0;
  std::vector<int32_t> tables_, tail_slots_, seq_lens_;
};

// K/V rows of one step: N(0, 1) plus a per-channel offset (so channels differ in range, as real
// keys do), and row `zero_row` (if inside) all zeros of alternating sign.
std::vector<float> StepRows(int32_t num_tokens, int64_t stride, const Shape& s, float offset_scale,
                            int32_t zero_row, std::mt19937& rng) {
  std::vector<float> rows = RandomFloats(size_t(num_tokens) * stride, rng);
  const int64_t row_len = int64_t{s.num_kv_heads} * s.head_dim;
  std::vector<float> offsets = RandomFloats(row_len, rng, offset_scale);
  for (int32_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < row_len; ++i) {
      float& x = rows[t * stride + i];
      x = t == zero_row ? (i % 3 == 0 ? -0.0f : 0.0f) : x + offsets[i];
    }
  }
  return rows;
}

// Rows per step of each sequence of the write scenario, in units of the block size.
std::vector<std::vector<int32_t>> WriteChunks(int32_t bs) {
  return {
      {bs + 5, 1, 1, bs - 3, 1},          // crosses a block inside a prefill, then decodes
      {5, bs - 5, 1, 2 * bs, 3},          // completes a block from the tail exactly
      {2 * bs, 0, 2 * bs + 1, 1, bs - 1},  // whole blocks, a step without rows
      {3, 1, 2, 1, 1},                    // the padding sequence
      {bs - 1, 1, 1, 2 * bs + 1, bs},     // a decode row completes a block
  };
}
constexpr int32_t kPaddingSeq = 3;

// The attention scenario: its last step has 4 decode rows (one completes a block, one sees a
// 2-token context) and prefill chunks of 3 and 5 rows.
std::vector<std::vector<int32_t>> AttentionChunks(int32_t bs) {
  return {
      {bs + 5, 1, 1, bs - 3, 1},
      {5, bs - 5, 1, 2 * bs, 3},
      {2 * bs, 0, 2 * bs + 1, 1, 1},
      {bs - 1, 1, 1, 2 * bs + 1, 5},
      {bs - 1, 0, 0, 0, 1},
      {1, 0, 0, 0, 1},
  };
}

KvWriteArgs WriteArgs(const float* k, const float* v, int64_t stride, int32_t num_tokens,
                      const int32_t* slots, const PagedKvView& cache, int32_t num_seqs,
                      const int32_t* query_start, const int32_t* seq_lens,
                      const int32_t* tail_slots) {
  KvWriteArgs args;
  args.k = k;
  args.v = v;
  args.k_stride = args.v_stride = stride;
  args.num_tokens = num_tokens;
  args.slot_mapping = slots;
  args.cache = cache;
  args.batch = {num_seqs, query_start, seq_lens, tail_slots};
  return args;
}

void CheckWrite(const Shape& shape, std::mt19937& rng) {
  SCOPED_TRACE(Describe(shape));
  Scenario sc(shape, WriteChunks(shape.block_size), kPaddingSeq, rng);
  HostCache host = MakeCache(shape, sc.num_blocks(), sc.num_tail_slots(), rng, true);
  DeviceCache dev(host);
  DeviceArray<int32_t> d_tails(sc.tail_slots());
  const int64_t stride = int64_t{shape.num_kv_heads} * shape.head_dim + 3;
  for (int32_t step = 0; step < sc.num_steps(); ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    std::vector<int32_t> query_start, seq_lens, slots;
    sc.NextStep(&query_start, &seq_lens, &slots);
    const int32_t num_tokens = query_start.back();
    const auto k = StepRows(num_tokens, stride, shape, 3.0f, 2, rng);
    const auto v = StepRows(num_tokens, stride, shape, 1.0f, 4, rng);
    ref::WriteKv(WriteArgs(k.data(), v.data(), stride, num_tokens, slots.data(), host.view,
                           sc.num_seqs(), query_start.data(), seq_lens.data(),
                           sc.tail_slots().data()));
    DeviceArray<float> d_k(k), d_v(v);
    DeviceArray<int32_t> d_slots(slots), d_start(query_start), d_lens(seq_lens);
    ASSERT_EQ(cuda::WriteKv(WriteArgs(d_k.get(), d_v.get(), stride, num_tokens, d_slots.get(),
                                      dev.view, sc.num_seqs(), d_start.get(), d_lens.get(),
                                      d_tails.get()),
                            nullptr),
              cudaSuccess);
    ASSERT_EQ(dev.k.ToHost(), host.k) << "K region";
    ASSERT_EQ(dev.v.ToHost(), host.v) << "V region";
    ASSERT_EQ(dev.tail_k.ToHost(), host.tail_k) << "K tails";
    ASSERT_EQ(dev.tail_v.ToHost(), host.tail_v) << "V tails";
  }
}

// Decode and prefill rows of the last step of AttentionChunks() (or of `chunks`) against the
// reference.
void CheckAttention(const Shape& shape, std::mt19937& rng,
                    std::vector<std::vector<int32_t>> chunks = {}) {
  SCOPED_TRACE(Describe(shape));
  if (chunks.empty()) chunks = AttentionChunks(shape.block_size);
  Scenario sc(shape, chunks, -1, rng);
  HostCache host = MakeCache(shape, sc.num_blocks(), sc.num_tail_slots(), rng, false);
  const int64_t stride = int64_t{shape.num_kv_heads} * shape.head_dim;
  std::vector<int32_t> query_start, seq_lens, slots;
  for (int32_t step = 0; step < sc.num_steps(); ++step) {
    sc.NextStep(&query_start, &seq_lens, &slots);
    const int32_t num_tokens = query_start.back();
    const auto k = StepRows(num_tokens, stride, shape, 3.0f, -1, rng);
    const auto v = StepRows(num_tokens, stride, shape, 1.0f, -1, rng);
    ref::WriteKv(WriteArgs(k.data(), v.data(), stride, num_tokens, slots.data(), host.view,
                           sc.num_seqs(), query_start.data(), seq_lens.data(),
                           sc.tail_slots().data()));
  }
  const int32_t num_seqs = sc.num_seqs();
  std::vector<int32_t> tail_slots = sc.tail_slots();
  if (host.view.low_bit()) {
    // The first sequence with a partial block reads it packed (tail slot -1): pack it from its
    // tail rows, as a padding sequence's block would be.
    for (int32_t s = 0; s < num_seqs; ++s) {
      if (seq_lens[s] % shape.block_size == 0) continue;
      const int32_t block = sc.tables()[s * sc.blocks_per_seq() + seq_lens[s] / shape.block_size];
      std::vector<float> rows(size_t(shape.block_size) * shape.head_dim, 0.0f);
      for (int32_t h = 0; h < shape.num_kv_heads; ++h) {
        for (int32_t is_v = 0; is_v < 2; ++is_v) {
          const uint16_t* tail =
              (is_v ? host.tail_v : host.tail_k).data() +
              host.view.tail_index(tail_slots[s], h, seq_lens[s] / shape.block_size * shape.block_size);
          for (int32_t i = 0; i < seq_lens[s] % shape.block_size * shape.head_dim; ++i) {
            rows[i] = Bf16ToF32(tail[i]);
          }
          uint8_t* dst = const_cast<uint8_t*>(is_v ? host.view.v_head_block(block, h)
                                                   : host.view.k_head_block(block, h));
          ref::PackHeadBlock(rows.data(), shape.head_dim, host.view.packed(), is_v != 0, dst);
        }
      }
      tail_slots[s] = -1;
      break;
    }
  }
  const int32_t num_tokens = query_start.back();
  const int64_t row = int64_t{shape.num_heads} * shape.head_dim;
  const int64_t q_stride = row + 4;
  const std::vector<float> q = RandomFloats(size_t(num_tokens) * q_stride, rng);

  PagedAttentionArgs args;
  args.q = q.data();
  args.q_stride = q_stride;
  args.out_stride = row;
  args.num_heads = shape.num_heads;
  args.cache = host.view;
  args.num_seqs = num_seqs;
  args.query_start = query_start.data();
  args.seq_lens = seq_lens.data();
  args.block_tables = sc.tables().data();
  args.max_blocks_per_seq = sc.blocks_per_seq();
  args.tail_slots = tail_slots.data();
  args.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  args.num_tokens = num_tokens;
  std::vector<float> want(size_t(num_tokens) * row);
  args.out = want.data();
  ref::PagedAttention(args);

  DeviceCache dev(host);
  DeviceArray<float> d_q(q);
  DeviceArray<int32_t> d_start(query_start), d_lens(seq_lens), d_tables(sc.tables()),
      d_tails(tail_slots);
  args.q = d_q.get();
  args.cache = dev.view;
  args.query_start = d_start.get();
  args.seq_lens = d_lens.get();
  args.block_tables = d_tables.get();
  args.tail_slots = d_tails.get();
  const int32_t max_seq_len = sc.blocks_per_seq() * shape.block_size;
  std::vector<bool> decode_row(num_tokens);
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = query_start[s]; t < query_start[s + 1]; ++t) {
      decode_row[t] = query_start[s + 1] - query_start[s] == 1;
    }
  }
  auto rows_of = [&](const std::vector<float>& all, bool decode) {
    std::vector<float> out;
    for (int32_t t = 0; t < num_tokens; ++t) {
      if (decode_row[t] != decode) continue;
      out.insert(out.end(), all.begin() + t * row, all.begin() + (t + 1) * row);
    }
    return out;
  };

  {  // every row through the simple kernel
    DeviceArray<float> d_out(std::vector<float>(want.size(), kSentinel));
    args.out = d_out.get();
    ASSERT_EQ(cuda::PagedAttention(args, num_tokens, nullptr), cudaSuccess);
    EXPECT_LE(MaxRelDiff(d_out.ToHost(), want), 1e-4f) << "PagedAttention, every row";
  }
  {  // prefill rows only; decode rows untouched
    DeviceArray<float> d_out(std::vector<float>(want.size(), kSentinel));
    args.out = d_out.get();
    ASSERT_EQ(cuda::PagedAttention(args, num_tokens, nullptr,
                                   cuda::PagedAttentionRows::kSkipDecode),
              cudaSuccess);
    const std::vector<float> got = d_out.ToHost();
    EXPECT_LE(MaxRelDiff(rows_of(got, false), rows_of(want, false)), 1e-4f) << "prefill rows";
    const std::vector<float> decode = rows_of(got, true);
    EXPECT_EQ(std::count(decode.begin(), decode.end(), kSentinel),
              static_cast<std::ptrdiff_t>(decode.size()))
        << "kSkipDecode wrote decode rows";
  }
  {  // decode rows on the tensor cores; prefill rows untouched
    ASSERT_TRUE(cuda::DecodeAttentionKvSupports(args));
    const size_t workspace_bytes = cuda::DecodeAttentionWorkspaceBytes(
        num_seqs, shape.num_heads, shape.head_dim, max_seq_len);
    DeviceArray<uint8_t> d_workspace(
        std::vector<uint8_t>(std::max<size_t>(workspace_bytes, 1), 0xff));  // NaN floats
    DeviceArray<float> d_out(std::vector<float>(want.size(), kSentinel));
    args.out = d_out.get();
    ASSERT_EQ(cuda::DecodeAttentionKv(args, max_seq_len, d_workspace.get(), workspace_bytes,
                                      nullptr),
              cudaSuccess);
    const std::vector<float> got = d_out.ToHost();
    const float tolerance = shape.dtype == DType::kF8E4M3 ? 2e-3f
                            : shape.dtype == DType::kKvInt2 ? 2e-2f
                                                          : 1e-2f;
    EXPECT_LE(MaxRelDiff(rows_of(got, true), rows_of(want, true)), tolerance) << "decode rows";
    const std::vector<float> prefill = rows_of(got, false);
    EXPECT_EQ(std::count(prefill.begin(), prefill.end(), kSentinel),
              static_cast<std::ptrdiff_t>(prefill.size()))
        << "DecodeAttentionKv wrote prefill rows";
  }
}

class CudaKvLowBitTest : public gpu_test::GpuTest {};

TEST_F(CudaKvLowBitTest, WriteMatchesReferenceByteForByte) {
  std::mt19937 rng(71);
  for (DType dtype : {DType::kKvInt8, DType::kKvInt4, DType::kKvInt2}) {
    for (bool k_per_token : {false, true}) {
      for (int32_t head_dim : {64, 128}) {
        for (int32_t block_size : {32, 64}) {
          CheckWrite({dtype, k_per_token, head_dim, block_size, 4, 2}, rng);
        }
      }
    }
  }
  CheckWrite({DType::kKvInt4, false, 32, 16, 1, 1}, rng);    // smallest layout
  CheckWrite({DType::kKvInt2, true, 256, 128, 8, 1}, rng);   // 64 KiB of rows in shared memory
  // Residual windows: rings of 2 and 3 blocks.
  CheckWrite({DType::kKvInt4, false, 64, 32, 4, 2, 2}, rng);
  CheckWrite({DType::kKvInt2, false, 128, 16, 4, 2, 3}, rng);
}

TEST_F(CudaKvLowBitTest, AttentionMatchesReference) {
  std::mt19937 rng(73);
  for (DType dtype : {DType::kKvInt8, DType::kKvInt4, DType::kKvInt2}) {
    for (bool k_per_token : {false, true}) {
      for (int32_t head_dim : {64, 128}) {
        for (int32_t block_size : {32, 64}) {
          for (int32_t group : {1, 4, 8}) {
            CheckAttention({dtype, k_per_token, head_dim, block_size, 2 * group, 2}, rng);
          }
        }
      }
    }
  }
  // Residual windows: the newest blocks read from rings of 2 and 3 blocks.
  CheckAttention({DType::kKvInt4, false, 64, 32, 8, 2, 2}, rng);
  CheckAttention({DType::kKvInt2, true, 128, 16, 4, 2, 3}, rng);
}

TEST_F(CudaKvLowBitTest, Fp8AttentionMatchesReference) {
  std::mt19937 rng(79);
  for (int32_t head_dim : {64, 128}) {
    for (int32_t block_size : {16, 5}) {
      for (int32_t group : {1, 4, 8}) {
        CheckAttention({DType::kF8E4M3, false, head_dim, block_size, 2 * group, 2}, rng);
      }
    }
  }
}

TEST_F(CudaKvLowBitTest, Fp8WriteSaturatesAsReference) {
  // Values far beyond +-448 and below the smallest subnormal, bit for bit.
  std::mt19937 rng(83);
  const Shape shape{DType::kF8E4M3, false, 64, 16, 2, 2};
  const int32_t num_tokens = 40, num_blocks = 4;
  HostCache host = MakeCache(shape, num_blocks, 0, rng, true);
  DeviceCache dev(host);
  const int64_t stride = int64_t{shape.num_kv_heads} * shape.head_dim;
  std::vector<float> k = RandomFloats(size_t(num_tokens) * stride, rng, 300.0f);
  std::vector<float> v = RandomFloats(size_t(num_tokens) * stride, rng, 1e-3f);
  std::vector<int32_t> slots(num_tokens);
  std::iota(slots.begin(), slots.end(), 3);
  KvWriteArgs args = WriteArgs(k.data(), v.data(), stride, num_tokens, slots.data(), host.view,
                               0, nullptr, nullptr, nullptr);
  ref::WriteKv(args);
  DeviceArray<float> d_k(k), d_v(v);
  DeviceArray<int32_t> d_slots(slots);
  args.k = d_k.get();
  args.v = d_v.get();
  args.slot_mapping = d_slots.get();
  args.cache = dev.view;
  ASSERT_EQ(cuda::WriteKv(args, nullptr), cudaSuccess);
  EXPECT_EQ(dev.k.ToHost(), host.k);
  EXPECT_EQ(dev.v.ToHost(), host.v);
}

TEST_F(CudaKvLowBitTest, LongContextSplits) {
  // 8K-token contexts over many splits (and a short one whose later splits are empty), a
  // 3-row prefill beside them.
  std::mt19937 rng(89);
  for (DType dtype : {DType::kKvInt4, DType::kF8E4M3}) {
    const std::vector<std::vector<int32_t>> chunks = {{8152, 1}, {8189, 1}, {300, 3}, {100, 1}};
    CheckAttention({dtype, false, 128, 64, 32, 8}, rng, chunks);
  }
}

// Without a device: the launchers refuse what they do not serve.
TEST(CudaKvLowBitArgs, LaunchersRefuseUnsupportedShapes) {
  PagedKvView cache;
  cache.dtype = DType::kKvInt4;
  cache.num_kv_heads = 2;
  cache.head_dim = 128;
  cache.block_size = 32;
  EXPECT_TRUE(cuda::WriteKvLowBitSupports(cache));
  EXPECT_TRUE(cuda::PagedAttentionSupports(cache));
  cache.block_size = 48;
  EXPECT_FALSE(cuda::WriteKvLowBitSupports(cache));
  cache.block_size = 32;
  cache.head_dim = 96 + 16;  // not a multiple of 32
  EXPECT_FALSE(cuda::WriteKvLowBitSupports(cache));
  EXPECT_FALSE(cuda::PagedAttentionSupports(cache));
  cache.head_dim = 512;
  EXPECT_FALSE(cuda::WriteKvLowBitSupports(cache));
  EXPECT_FALSE(cuda::PagedAttentionSupports(cache));

  PagedAttentionArgs args;
  args.cache = cache;
  args.cache.head_dim = 96;  // served by the simple kernel only
  args.num_heads = 8;
  EXPECT_FALSE(cuda::DecodeAttentionKvSupports(args));
  args.cache.head_dim = 128;
  EXPECT_TRUE(cuda::DecodeAttentionKvSupports(args));
  args.num_heads = 2 * (cuda::kDecodeAttentionMaxGroup + 1);
  EXPECT_FALSE(cuda::DecodeAttentionKvSupports(args));
  args.num_heads = 8;
  args.cache.block_size = 5;  // fp8 takes any block size, the packed formats do not
  EXPECT_FALSE(cuda::DecodeAttentionKvSupports(args));
  args.cache.dtype = DType::kF8E4M3;
  EXPECT_TRUE(cuda::DecodeAttentionKvSupports(args));
  args.cache.dtype = DType::kBF16;  // DecodeAttention's
  EXPECT_FALSE(cuda::DecodeAttentionKvSupports(args));

  KvWriteArgs write;
  write.num_tokens = 1;
  write.cache = cache;
  write.cache.head_dim = 128;
  write.batch.num_seqs = 1;  // no tails, no batch arrays
  EXPECT_EQ(cuda::WriteKv(write, nullptr), cudaErrorInvalidValue);
  write.cache.dtype = DType::kQ4_0;  // a weight format
  EXPECT_EQ(cuda::WriteKv(write, nullptr), cudaErrorInvalidValue);
}

// CheckKvFormat accepts exactly the shapes the kernels above serve (no device needed).
TEST(CudaKvLowBitArgs, CheckKvFormatMatchesTheKernels) {
  const CudaOps ops(nullptr, nullptr);
  auto check = [&](DType dtype, bool k_per_token, int32_t head_dim, int32_t block_size,
                   int32_t num_heads, int32_t num_kv_heads) {
    return ops.CheckKvFormat({dtype, k_per_token, head_dim, block_size, num_heads, num_kv_heads});
  };
  for (DType dtype : {DType::kKvInt8, DType::kKvInt4, DType::kKvInt2}) {
    for (bool k_per_token : {false, true}) {
      for (int32_t head_dim : {32, 64, 96, 128, 256}) {
        for (int32_t block_size : {16, 32, 64, 128}) {
          EXPECT_TRUE(check(dtype, k_per_token, head_dim, block_size, 32, 8).ok())
              << DTypeName(dtype) << " " << head_dim << " " << block_size;
        }
      }
      EXPECT_FALSE(check(dtype, k_per_token, 512, 32, 32, 8).ok());  // beyond the kernels
      EXPECT_FALSE(check(dtype, k_per_token, 80, 32, 32, 8).ok());   // not a multiple of 32
      EXPECT_FALSE(check(dtype, k_per_token, 128, 48, 32, 8).ok());  // K group of 48 tokens
      EXPECT_FALSE(check(dtype, k_per_token, 128, 32, 30, 8).ok());  // heads not a multiple
    }
  }
  EXPECT_TRUE(check(DType::kF8E4M3, false, 128, 16, 32, 8).ok());
  EXPECT_TRUE(check(DType::kF8E4M3, false, 80, 5, 32, 32).ok());
  EXPECT_FALSE(check(DType::kF8E4M3, false, 512, 16, 32, 8).ok());
  EXPECT_TRUE(check(DType::kBF16, false, 128, 16, 32, 8).ok());
  EXPECT_FALSE(check(DType::kBF16, false, 512, 16, 32, 8).ok());
  const absl::Status refused = check(DType::kKvInt4, true, 512, 32, 32, 8);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("int4"), std::string::npos) << refused.message();
  // The kernels read codes in rows; the CPU's lanes order is another layout.
  KvFormatSpec lanes{DType::kKvInt4, false, 128, 32, 32, 8};
  EXPECT_TRUE(ops.CheckKvFormat(lanes).ok());
  lanes.code_order = KvCodeOrder::kLanes;
  EXPECT_FALSE(ops.CheckKvFormat(lanes).ok());
  EXPECT_EQ(ops.PackedKvCodeOrder(), KvCodeOrder::kRows);
}

}  // namespace
}  // namespace loom
