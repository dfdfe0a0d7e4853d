// Prefill attention on tensor cores (mma.sync, FlashAttention-2 style); contract in
// prefill_attention.h.
//
// Math. For a CTA's query tile Q [64, D] (one head, one sequence) and each key tile K, V
// [N, D] (N = 64, or 32 for D = 256; D = head_dim):
//   S = Q' K^T                      Q' = q * scale * log2(e), rounded to the cache's type T
//   m_new = max(m, rowmax(S));  alpha = 2^(m - m_new);  P = 2^(S - m_new)
//   l = alpha * l + rowsum(P);  O = alpha * O + T(P) V
// and finally out = O / l. Scores are thus in log2 units (log2(e) folded into the scale of q), so
// every exponential is one ex2.approx. A row max of -inf (a row that has seen no key yet: padding
// rows past q_len, or for N = 32 a row whose visible keys all lie in the next tile) is replaced
// by 0 in the exponents, so masked scores give 2^-inf = 0, never NaN; l = 0 stores 0.
//
// Work split. Grid (num_heads, ceil(max_query_len / 64) + num_seqs): y is a tile slot of a
// ragged numbering (SlotOf below) in which sequence s owns ceil(q_len / 64) consecutive slots
// plus at most one empty one (decode and idle sequences: just that); a sequence's latest,
// heaviest rows take its first slot. CTAs loop over slots with a stride of gridDim.y when the
// bound was tight. A CTA of
// 4 warps owns query rows [64 * tile, 64 * tile + 64) of one sequence and head; warp w owns 16 of
// them, [16 w, 16 w + 16), and every lane two: 16 w + lane / 4 and that + 8. The CTA visits the
// key tiles ending at key_end = (position of its last valid row) + 1, going backwards from the
// diagonal: tile i holds keys [key_end - N (i + 1), key_end - N i). Keys before the first key any
// row can see (0, or the window start of the first row) end the walk, so fully masked tiles are
// never visited. Only tiles that cross a row's causal limit (the first, and for N = 32 the second)
// or a window start (the last ones) evaluate the mask.
//
// Shared memory (T = bf16 or f16, rows padded to D + 8 elements = an odd number of 16-byte
// chunks, so the 8 rows an ldmatrix phase reads fall in 8 distinct bank groups):
//   Q  [64][D + 8]          q tile, pre-scaled and rounded (zero rows past q_len)
//   K  [2][N][D + 8]        double-buffered key tiles, filled with 16-byte cp.async.cg
//   V  [2][N][D + 8]        double-buffered value tiles
// 45 KiB for D = 64 (three CTAs per SM), 85 KiB for D = 128 and 99 KiB for D = 256 (two CTAs
// per SM; ptxas: 238 registers for D = 128, 255 for D = 256, which spills one register outside
// the key loop; 168 for D = 64). The cp.async gather of tile i + 1
// (each key row looked up in the block table; rows outside [key_begin, key_end) zero-filled with
// src-size 0, never read) is issued right after the barrier that opens tile i, so it overlaps
// tile i's math. For D <= 128 a warp keeps its Q fragments in registers for the whole walk; for
// D = 256 it re-reads them from shared memory per k-step (registers: O alone is 128).
//
// Fragments (PTX mma.m16n8k16, .row.col, T inputs, f32 accumulators; g = lane / 4, c = lane % 4):
//   A (16x16): a[0] = (g, 2c..2c+1), a[1] = (g + 8, 2c..2c+1), a[2] = (g, 2c+8..2c+9),
//              a[3] = (g + 8, 2c+8..2c+9)   (row, columns; the lower column in the low half)
//   B (16x8):  b[0] = (k 2c..2c+1, n g), b[1] = (k 2c + 8.., n g)
//   C (16x8):  c[0..1] = (g, 2c..2c+1), c[2..3] = (g + 8, 2c..2c+1)
//   S = Q K^T: A from ldmatrix.x4 of Q rows (lanes 0-15 rows 0-15 at column 0, lanes 16-31 rows
//     0-15 at column 8); B from ldmatrix.x4 of K rows = keys (lanes 0-7 keys 0-7 column 0, 8-15
//     keys 0-7 column 8, 16-23 keys 8-15 column 0, 24-31 keys 8-15 column 8), which gives the B
//     fragments of two 8-key n-tiles.
//   O += P V: the S accumulators of n-tiles 2k and 2k + 1 are, packed to T pairs, exactly the A
//     fragment of k-step k (keys 16k..16k+15); B from ldmatrix.x4.trans of V rows = keys (lanes
//     0-7 keys 0-7 column 0, 8-15 keys 8-15 column 0, 16-23 keys 0-7 column 8, 24-31 keys 8-15
//     column 8): the B fragments of two 8-wide slices of head_dim.
//
// Cost per CTA with K key tiles visited: 4 * 64 * N * D * K tensor-core FLOPs (the useful part,
// 4 * D * sum over rows of keys seen, is what benchmarks report); bytes: 64 * D * 4 of q read,
// 64 * D * 4 of out written, 2 * N * D * 2 * K of K/V gathered (served mostly from L2: the heads
// of a GQA group and neighbouring tiles of one sequence read the same blocks).
// Throughput bound: with 16 rows per warp every warp reads every K/V fragment from shared memory
// itself, one 512-byte ldmatrix per two HMMA.16816, so the shared-memory pipe (128 B/clock/SM),
// not the tensor cores, limits the kernel to roughly half of the dense mma peak. 32 rows per warp
// (a 128-row tile, Q re-read from shared memory) would halve that traffic at ~255 registers.
#include "kernels/cuda/prefill_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/mma_inl.cuh"

namespace loom::cuda {
namespace {

using internal::MmaM16N8K16;
using internal::PackPairTo;
using internal::SharedAddress;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockM = 16 * kWarps;  // query rows per CTA
constexpr int kMaxGridY = 65535;
constexpr float kLog2e = 1.4426950408889634f;

template <int kHeadDim>
struct Shape {
  static constexpr int kBlockN = kHeadDim <= 128 ? 64 : 32;  // keys per tile
  static constexpr int kStride = kHeadDim + 8;                // shared row stride, elements
  static constexpr int kChunks = kHeadDim / 8;                // 16-byte chunks per row
  static constexpr int kKSteps = kHeadDim / 16;               // k-steps of Q K^T
  static constexpr int kKeyTiles = kBlockN / 8;               // n-tiles of S
  static constexpr int kDimTiles = kHeadDim / 8;              // n-tiles of O
  static constexpr bool kQInRegs = kHeadDim <= 128;
  static constexpr int kQElems = kBlockM * kStride;
  static constexpr int kKvElems = kBlockN * kStride;
  static constexpr int kSmemBytes = 2 * (kQElems + 4 * kKvElems);
  // CTAs per SM the registers are budgeted for (3 caps a thread at 168 registers, 2 at 255).
  static constexpr int kMinBlocks = kHeadDim <= 64 ? 3 : 2;
  static_assert(kHeadDim % 16 == 0 && kChunks % 2 == 0);
  static_assert(kBlockN * kChunks % kThreads == 0 && kBlockM * kHeadDim / 4 % kThreads == 0);
};

// n / divisor for 0 <= n < 2^31 with a multiply-high and a shift (round-up method: magic =
// floor(2^32 (2^shift - divisor) / divisor) + 1 with 2^shift >= divisor), so the per-key block
// lookup needs no integer division.
struct BlockDivider {
  uint32_t divisor;
  uint32_t magic;
  uint32_t shift;

  __device__ __forceinline__ uint32_t Div(uint32_t n) const {
    return static_cast<uint32_t>((static_cast<uint64_t>(__umulhi(n, magic)) + n) >> shift);
  }
};

BlockDivider MakeBlockDivider(uint32_t divisor) {
  uint32_t shift = 0;
  while ((uint64_t{1} << shift) < divisor) ++shift;
  const uint64_t magic = (uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor) / divisor + 1;
  return {divisor, static_cast<uint32_t>(magic), shift};
}

// ---- warp-level primitives (PTX) ----

// 16 bytes global -> shared, bypassing L1; zero-fills the destination (reads nothing) when
// !valid.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- tile stages ----

// Where a CTA's keys come from: k/v already offset to the kv head; rows of the sequence's table.
template <typename T>
struct KvSource {
  const T* k;
  const T* v;
  const int32_t* blocks;
  int64_t block_stride;
  BlockDivider div;
};

// Q tile -> shared: rows [0, rows) of q (row stride q_stride, from `q`), times `scale`, rounded
// to T; rows past `rows` are zero.
template <typename T, int kHeadDim>
__device__ __forceinline__ void LoadQ(const float* q, int64_t q_stride, int rows, float scale,
                                      bool q_vec4, T* q_smem) {
  using S = Shape<kHeadDim>;
  constexpr int kQuadsPerRow = kHeadDim / 4;
#pragma unroll 4
  for (int idx = threadIdx.x; idx < kBlockM * kQuadsPerRow; idx += kThreads) {
    const int row = idx / kQuadsPerRow;
    const int col = idx % kQuadsPerRow * 4;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row < rows) {
      const float* src = q + row * q_stride + col;
      x = q_vec4 ? __ldg(reinterpret_cast<const float4*>(src))
                 : make_float4(__ldg(src), __ldg(src + 1), __ldg(src + 2), __ldg(src + 3));
    }
    *reinterpret_cast<uint2*>(q_smem + row * S::kStride + col) = make_uint2(
        PackPairTo<T>(x.x * scale, x.y * scale), PackPairTo<T>(x.z * scale, x.w * scale));
  }
}

// Queues the cp.async gather of keys [n0, n0 + N) into one K and one V buffer; keys outside
// [key_begin, key_end) are zero-filled.
template <typename T, int kHeadDim>
__device__ __forceinline__ void LoadKvTile(const KvSource<T>& src, int n0, int key_begin,
                                           int key_end, uint32_t k_dst, uint32_t v_dst) {
  using S = Shape<kHeadDim>;
#pragma unroll
  for (int i = 0; i < S::kBlockN * S::kChunks / kThreads; ++i) {
    const int idx = threadIdx.x + i * kThreads;
    const int row = idx / S::kChunks;
    const int col = idx % S::kChunks * 8;
    const int key = n0 + row;
    const bool valid = key >= key_begin && key < key_end;
    int64_t offset = 0;
    if (valid) {
      const uint32_t block = src.div.Div(static_cast<uint32_t>(key));
      const uint32_t slot = static_cast<uint32_t>(key) - block * src.div.divisor;
      offset = __ldg(src.blocks + block) * src.block_stride + int64_t{slot} * kHeadDim + col;
    }
    const uint32_t smem_offset = (row * S::kStride + col) * sizeof(T);
    CpAsync16(k_dst + smem_offset, src.k + offset, valid);
    CpAsync16(v_dst + smem_offset, src.v + offset, valid);
  }
}

// s = Q K^T for this warp's 16 rows and the tile's N keys. q_addr / k_addr: this lane's
// ldmatrix row addresses (see the fragment notes above).
template <typename T, int kHeadDim, int kQRegs>
__device__ __forceinline__ void Scores(float (&s)[Shape<kHeadDim>::kKeyTiles][4],
                                       const uint32_t (&q_frag)[kQRegs][4], uint32_t q_addr,
                                       uint32_t k_addr) {
  using S = Shape<kHeadDim>;
#pragma unroll
  for (int t = 0; t < S::kKeyTiles; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < S::kKSteps; ++kk) {
    uint32_t a[4];
    if constexpr (S::kQInRegs) {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = q_frag[kk][r];
    } else {
      LdMatrixX4(a, q_addr + kk * 16 * sizeof(T));
    }
#pragma unroll
    for (int p = 0; p < S::kKeyTiles / 2; ++p) {
      uint32_t b[4];
      LdMatrixX4(b, k_addr + (p * 16 * S::kStride + kk * 16) * sizeof(T));
      MmaM16N8K16<T>(s[2 * p], a, b[0], b[1]);
      MmaM16N8K16<T>(s[2 * p + 1], a, b[2], b[3]);
    }
  }
}

// Masks (to -inf) the scores a row may not see: key > pos, or key < max(0, pos - window + 1)
// (0 without a window). pos0: position of this lane's first row; its second row is pos0 + 8.
template <int kKeyTiles>
__device__ __forceinline__ void MaskScores(float (&s)[kKeyTiles][4], int n0, int pos0,
                                           int window) {
  const int key0 = n0 + 2 * (threadIdx.x % 4);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int pos = pos0 + 8 * half;
    const int lo = window > 0 ? max(0, pos - window + 1) : 0;
#pragma unroll
    for (int t = 0; t < kKeyTiles; ++t) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + 8 * t + e;
        if (key > pos || key < lo) s[t][2 * half + e] = -INFINITY;
      }
    }
  }
}

// Online softmax step: turns s into probabilities against the new row max and rescales o, the
// lane's partial row sums and maxima. The 4 lanes of a quad share rows; they agree on the max.
template <int kKeyTiles, int kDimTiles>
__device__ __forceinline__ void SoftmaxStep(float (&s)[kKeyTiles][4], float (&o)[kDimTiles][4],
                                            float (&row_max)[2], float (&row_sum)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float m = row_max[half];
#pragma unroll
    for (int t = 0; t < kKeyTiles; ++t) m = fmaxf(m, fmaxf(s[t][2 * half], s[t][2 * half + 1]));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    const float base = m == -INFINITY ? 0.0f : m;
    const float alpha = Exp2(row_max[half] - base);
    row_max[half] = m;
    float sum = 0.0f;
#pragma unroll
    for (int t = 0; t < kKeyTiles; ++t) {
      s[t][2 * half] = Exp2(s[t][2 * half] - base);
      s[t][2 * half + 1] = Exp2(s[t][2 * half + 1] - base);
      sum += s[t][2 * half] + s[t][2 * half + 1];
    }
    row_sum[half] = row_sum[half] * alpha + sum;
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      o[d][2 * half] *= alpha;
      o[d][2 * half + 1] *= alpha;
    }
  }
}

// o += T(p) V for the tile; v_addr: this lane's ldmatrix.trans row address.
template <typename T, int kHeadDim>
__device__ __forceinline__ void AccumulatePv(float (&o)[Shape<kHeadDim>::kDimTiles][4],
                                             const float (&p)[Shape<kHeadDim>::kKeyTiles][4],
                                             uint32_t v_addr) {
  using S = Shape<kHeadDim>;
#pragma unroll
  for (int kk = 0; kk < S::kBlockN / 16; ++kk) {
    const uint32_t a[4] = {PackPairTo<T>(p[2 * kk][0], p[2 * kk][1]),
                           PackPairTo<T>(p[2 * kk][2], p[2 * kk][3]),
                           PackPairTo<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           PackPairTo<T>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < kHeadDim / 16; ++dp) {
      uint32_t b[4];
      LdMatrixX4Trans(b, v_addr + (kk * 16 * S::kStride + dp * 16) * sizeof(T));
      MmaM16N8K16<T>(o[2 * dp], a, b[0], b[1]);
      MmaM16N8K16<T>(o[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// out rows [0, rows) (from `out`, row stride out_stride) = o / l for this warp's rows; l is the
// quad's sum of the lanes' partial row sums (0 for a row that saw no key: stores 0).
template <int kDimTiles>
__device__ __forceinline__ void StoreRows(float* out, int64_t out_stride, int rows,
                                          const float (&o)[kDimTiles][4],
                                          const float (&row_sum)[2]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float l = row_sum[half];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int row = threadIdx.x / 32 * 16 + lane / 4 + 8 * half;
    if (row < rows) {
      float* dst = out + row * out_stride + 2 * (lane % 4);
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        dst[8 * d] = o[d][2 * half] * inv;
        dst[8 * d + 1] = o[d][2 * half + 1] * inv;
      }
    }
  }
}

// What a CTA computes: rows [m0, m0 + rows) of sequence `seq`'s query rows, for one head.
struct TileWork {
  int seq;
  int64_t first_token;  // query row (token index) of tile row 0
  int rows;             // valid rows, <= kBlockM
  int pos0;             // position of tile row 0
  int key_begin;        // keys any valid row sees: [key_begin, key_end)
  int key_end;
  int mask_lo;          // tiles starting below this key need the window mask
  int num_tiles;
};

// Tile slots. Sequence s owns slots [SlotOf(s), SlotOf(s) + ceil(q_len(s) / 64)): from one
// sequence to the next, floor(query_start[s] / 64) + s grows by at least ceil(q_len / 64), so the
// ranges never overlap and SlotOf(num_seqs) bounds them all. A slot past its sequence's tiles (or
// of a sequence with fewer than 2 rows) is empty. The host needs no per-sequence plan, and a
// batch of many decode rows costs one empty slot per sequence, not a grid row.
__device__ __forceinline__ int SlotOf(const int32_t* query_start, int seq) {
  return query_start[seq] / kBlockM + seq;
}

// Fills `work` for `slot`; false when the slot is empty.
template <int kBlockN>
__device__ __forceinline__ bool PlanTile(const PagedAttentionArgs& args, int slot,
                                         TileWork* work) {
  int lo = 0, hi = args.num_seqs - 1;  // the last sequence with SlotOf(seq) <= slot
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (SlotOf(args.query_start, mid) <= slot) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int q_begin = args.query_start[lo];
  const int q_len = args.query_start[lo + 1] - q_begin;
  const int q_tiles = (q_len + kBlockM - 1) / kBlockM;
  const int k = slot - SlotOf(args.query_start, lo);
  if (q_len < 2 || k >= q_tiles) return false;
  const int m0 = (q_tiles - 1 - k) * kBlockM;  // a sequence's heaviest (last) tile first
  const int window = args.sliding_window;
  work->seq = lo;
  work->first_token = int64_t{q_begin} + m0;
  work->rows = min(kBlockM, q_len - m0);
  work->pos0 = args.seq_lens[lo] - q_len + m0;
  work->key_end = work->pos0 + work->rows;
  work->key_begin = window > 0 ? max(0, work->pos0 - window + 1) : 0;
  work->mask_lo = window > 0 ? max(0, work->key_end - window) : 0;
  const int span = work->key_end - work->key_begin;
  work->num_tiles = span > 0 ? (span + kBlockN - 1) / kBlockN : 0;
  return true;
}

// One CTA's tile: Q to shared memory (and registers), the walk over key tiles, the output.
template <typename T, int kHeadDim>
__device__ __forceinline__ void AttendTile(const PagedAttentionArgs& args, int head,
                                           const TileWork& work, const BlockDivider& div,
                                           bool q_vec4, T* smem) {
  using S = Shape<kHeadDim>;
  const PagedKvView& cache = args.cache;
  const int kv_head = head / (args.num_heads / cache.num_kv_heads);
  const int64_t head_stride = int64_t{cache.block_size} * kHeadDim;
  const KvSource<T> src = {static_cast<const T*>(cache.k) + kv_head * head_stride,
                           static_cast<const T*>(cache.v) + kv_head * head_stride,
                           args.block_tables + int64_t{work.seq} * args.max_blocks_per_seq,
                           head_stride * cache.num_kv_heads, div};
  constexpr uint32_t kBufBytes = S::kKvElems * sizeof(T);
  const uint32_t q_base = SharedAddress(smem);
  const uint32_t k_base = q_base + S::kQElems * sizeof(T);
  const uint32_t v_base = k_base + 2 * kBufBytes;

  // Tile 0's keys travel while q is converted.
  if (work.num_tiles > 0) {
    LoadKvTile<T, kHeadDim>(src, work.key_end - S::kBlockN, work.key_begin, work.key_end, k_base,
                            v_base);
  }
  CpAsyncCommit();
  LoadQ<T, kHeadDim>(args.q + work.first_token * args.q_stride + int64_t{head} * kHeadDim,
                     args.q_stride, work.rows, args.scale * kLog2e, q_vec4, smem);
  __syncthreads();

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  // This lane's ldmatrix row addresses (bytes), see the fragment notes at the top.
  const uint32_t q_addr =
      q_base + ((16 * warp + lane % 16) * S::kStride + lane / 16 * 8) * sizeof(T);
  const uint32_t k_lane = ((lane % 8 + lane / 16 * 8) * S::kStride + lane / 8 % 2 * 8) * sizeof(T);
  const uint32_t v_lane = ((lane % 8 + lane / 8 % 2 * 8) * S::kStride + lane / 16 * 8) * sizeof(T);
  uint32_t q_frag[S::kQInRegs ? S::kKSteps : 1][4];
  if constexpr (S::kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < S::kKSteps; ++kk) LdMatrixX4(q_frag[kk], q_addr + kk * 16 * sizeof(T));
  }

  float o[S::kDimTiles][4];
#pragma unroll
  for (int d = 0; d < S::kDimTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  const int lane_pos0 = work.pos0 + 16 * warp + lane / 4;
  for (int i = 0; i < work.num_tiles; ++i) {
    const int n0 = work.key_end - (i + 1) * S::kBlockN;
    const uint32_t buf = (i % 2) * kBufBytes;
    CpAsyncWaitAll();
    // Tile i has landed for every thread, and every warp is done with tile i - 1's buffers.
    __syncthreads();
    if (i + 1 < work.num_tiles) {
      const uint32_t next = ((i + 1) % 2) * kBufBytes;
      LoadKvTile<T, kHeadDim>(src, n0 - S::kBlockN, work.key_begin, work.key_end, k_base + next,
                              v_base + next);
    }
    CpAsyncCommit();
    float s[S::kKeyTiles][4];
    Scores<T, kHeadDim>(s, q_frag, q_addr, k_base + buf + k_lane);
    if (n0 + S::kBlockN - 1 > work.pos0 || n0 < work.mask_lo) {
      MaskScores(s, n0, lane_pos0, args.sliding_window);
    }
    SoftmaxStep(s, o, row_max, row_sum);
    AccumulatePv<T, kHeadDim>(o, s, v_base + buf + v_lane);
  }

  StoreRows(args.out + work.first_token * args.out_stride + int64_t{head} * kHeadDim,
            args.out_stride, work.rows, o, row_sum);
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads, Shape<kHeadDim>::kMinBlocks)
    PrefillAttentionKernel(const PagedAttentionArgs args, const BlockDivider div,
                           const bool q_vec4) {
  extern __shared__ uint4 smem[];
  const int slot_end = SlotOf(args.query_start, args.num_seqs);
  for (int slot = blockIdx.y; slot < slot_end; slot += gridDim.y) {
    TileWork work;
    if (!PlanTile<Shape<kHeadDim>::kBlockN>(args, slot, &work)) continue;
    AttendTile<T, kHeadDim>(args, blockIdx.x, work, div, q_vec4, reinterpret_cast<T*>(smem));
    __syncthreads();  // shared memory is reused by the CTA's next slot
  }
}

template <typename T, int kHeadDim>
cudaError_t Launch(const PagedAttentionArgs& args, dim3 grid, const BlockDivider& div,
                   bool q_vec4, cudaStream_t stream) {
  constexpr int kSmemBytes = Shape<kHeadDim>::kSmemBytes;
  const cudaError_t error = cudaFuncSetAttribute(
      PrefillAttentionKernel<T, kHeadDim>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (error != cudaSuccess) return error;
  PrefillAttentionKernel<T, kHeadDim><<<grid, kThreads, kSmemBytes, stream>>>(args, div, q_vec4);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchForHeadDim(const PagedAttentionArgs& args, dim3 grid, const BlockDivider& div,
                             bool q_vec4, cudaStream_t stream) {
  switch (args.cache.head_dim) {
    case 64: return Launch<T, 64>(args, grid, div, q_vec4, stream);
    case 80: return Launch<T, 80>(args, grid, div, q_vec4, stream);
    case 96: return Launch<T, 96>(args, grid, div, q_vec4, stream);
    case 128: return Launch<T, 128>(args, grid, div, q_vec4, stream);
    case 256: return Launch<T, 256>(args, grid, div, q_vec4, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool PrefillAttentionSupports(const PagedAttentionArgs& args) {
  const PagedKvView& cache = args.cache;
  const int32_t d = cache.head_dim;
  return (cache.dtype == DType::kBF16 || cache.dtype == DType::kF16) &&
         (d == 64 || d == 80 || d == 96 || d == 128 || d == 256) && cache.block_size >= 1 &&
         cache.num_kv_heads >= 1 && args.num_heads >= 1 &&
         args.num_heads % cache.num_kv_heads == 0 && args.num_seqs >= 0 &&
         args.max_blocks_per_seq >= 0 && args.sliding_window >= 0 && Aligned16(cache.k) &&
         Aligned16(cache.v);
}

cudaError_t PrefillAttention(const PagedAttentionArgs& args, int32_t max_query_len,
                             cudaStream_t stream) {
  if (!PrefillAttentionSupports(args) || max_query_len < 0) return cudaErrorInvalidValue;
  if (args.num_seqs == 0 || max_query_len < 2) return cudaSuccess;
  // Enough slots for every tile when max_query_len bounds the batch's token count (as the engine
  // passes it); with a tighter bound the CTAs loop over the remaining slots.
  const int64_t slots = (int64_t{max_query_len} + kBlockM - 1) / kBlockM + args.num_seqs;
  const dim3 grid(static_cast<unsigned>(args.num_heads),
                  static_cast<unsigned>(std::min<int64_t>(slots, kMaxGridY)));
  // q rows as float4 when every row start is 16-byte aligned (head offsets are: head_dim % 16
  // == 0).
  const bool q_vec4 = Aligned16(args.q) && args.q_stride % 4 == 0;
  const BlockDivider div = MakeBlockDivider(static_cast<uint32_t>(args.cache.block_size));
  if (args.cache.dtype == DType::kBF16) {
    return LaunchForHeadDim<__nv_bfloat16>(args, grid, div, q_vec4, stream);
  }
  return LaunchForHeadDim<__half>(args, grid, div, q_vec4, stream);
}

}  // namespace loom::cuda
