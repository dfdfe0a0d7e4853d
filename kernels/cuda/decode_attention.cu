// Split-KV decode attention with the GQA group on the tensor cores (contract in
// decode_attention.h).
//
// Math. For one (sequence, kv_head) with group G = num_heads / num_kv_heads, the G query rows form
// Q: [16, head_dim] (rows >= G are zero), pre-multiplied by scale * log2(e) and rounded to the
// cache dtype, so scores are in base 2. Keys [first, p] are cut into 16-key chunks at absolute
// positions 16c .. 16c + 15; the chunks are dealt to `num_splits` CTAs in contiguous runs of
// ceil(chunks / num_splits). Each warp keeps, per query row r, an online softmax over its chunks:
//   S = Q K_c^T (keys outside [first, p] set to -inf)        [16, 16], f32
//   m' = max(m, rowmax S);  P = 2^(S - m');  l = l * 2^(m - m') + rowsum P
//   O = O * 2^(m - m') + P V_c                               [16, head_dim], f32
// and a CTA merges its warps (M = max m_w, L = sum 2^(m_w - M) l_w, O = sum 2^(m_w - M) O_w / L).
// With one split that is the output; otherwise the CTA stores O and lse = M + log2(L) (-inf when
// the split saw no key) and the combine kernel forms out = sum_i 2^(lse_i - max) O_i / sum_i
// 2^(lse_i - max), skipping splits whose lse is -inf (their O was never written).
//
// Who owns what. Grid: one CTA of 4 warps per (sequence, kv_head, split). The CTA converts its
// group's q rows into shared memory once; each warp then runs its own cp.async pipeline
// (kStages buffers of one 16-key K chunk and V chunk, 16-byte copies into a row-XOR swizzled
// layout, no CTA barrier in the loop) over chunks warp, warp + 4, ... of the split. Per chunk a
// warp does S = Q K^T with ldmatrix + mma.m16n8k16 (head_dim / 16 k-steps, two 8-key n-tiles),
// the softmax in registers (lane holds rows lane/4 and lane/4 + 8), and O += P V with P reused
// from the score registers as the A operand and V through ldmatrix.trans (head_dim / 8 n-tiles).
// A thread holds head_dim / 2 f32 accumulators. When block_size is a multiple of 16 a chunk lies
// in one KV block (one block-table read per chunk, rows contiguous); otherwise lanes 0-15 each
// look up one key's block and the row offsets are shuffled to the lanes that copy them. The
// block-table entry of the next chunk is read one iteration ahead.
//
// Bytes moved per (sequence, kv_head): 2 * keys * head_dim * sizeof(cache dtype) from K/V (each
// byte once per group), 4 * G * head_dim of q and of out; with splits, 4 * G * (head_dim + 1)
// written and read back per split. Shared memory per CTA: 16 * head_dim * 2 (q) + 4 warps *
// kStages * 64 * head_dim (K/V stages) = 66 KiB / 100 KiB / 136 KiB for head_dim 64 / 128 / 256,
// i.e. 3 / 2 / 1 CTAs per SM.
//
// Split heuristic (host, DecodeAttentionNumSplits): with base = num_seqs * num_kv_heads CTAs and
// a wave of sm_count * CTAs-per-SM: one split when base already fills 0.8 of a wave; otherwise
// the smallest count whose wave efficiency (CTAs / (waves * wave)) is at least 0.85 of the best,
// never more than 64, than max_seq_len / 128 (a split gets 8 chunks of a max-length sequence),
// or than 4096 / base CTAs (which bounds the workspace independently of the device).
#include "kernels/cuda/decode_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/mma_inl.cuh"

namespace loom::cuda {
namespace {

using internal::LdMatrixX4;
using internal::LdMatrixX4Trans;
using internal::MmaM16N8K16;
using internal::PackPairTo;
using internal::QuadMaxOf;
using internal::QuadSumOf;
using internal::SharedAddress;
using internal::SwizzledOffset;
using internal::WarpMaxOf;
using internal::WarpSumOf;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunkKeys = 16;   // keys per warp step
constexpr int kRows = 16;        // query rows of the mma tile (the group, zero-padded)
constexpr int kMaxSplits = 64;
constexpr int kMinChunksPerSplit = 8;
constexpr int kMaxSplitCtas = 4096;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kSmemPerSm = 228 * 1024;  // sm_90 shared memory per SM
constexpr int kSmemReservedPerCta = 1024;

template <int D>
struct Config {
  static_assert(D == 64 || D == 128 || D == 256);
  static constexpr int kStages = D == 64 ? 4 : D == 128 ? 3 : 2;
  static constexpr int kUnits = D / 8;                 // 16-byte units per row
  static constexpr int kUnitsPerLane = kChunkKeys * kUnits / 32;
  static constexpr int kTileElems = kChunkKeys * D;    // one K (or V) chunk
  static constexpr int kStageElems = 2 * kTileElems;   // K chunk, then V chunk
  static constexpr int kQElems = kRows * D;
  static constexpr int kScratchStride = D + 8;         // floats per merge row (spreads banks)
  static constexpr int kPipeBytes = kWarps * kStages * kStageElems * 2;
  static constexpr int kScratchBytes = kWarps * kRows * kScratchStride * 4;
  static constexpr int kSmemBytes = kQElems * 2 + std::max(kPipeBytes, kScratchBytes);
  static constexpr int kStaticSmemBytes = 2 * kWarps * kRows * 4;
  static constexpr int kCtasPerSm =
      kSmemPerSm / (kSmemBytes + kStaticSmemBytes + kSmemReservedPerCta);
  static_assert(kCtasPerSm >= 1);
};

int CtasPerSm(int32_t head_dim) {
  switch (head_dim) {
    case 64: return Config<64>::kCtasPerSm;
    case 128: return Config<128>::kCtasPerSm;
    default: return Config<256>::kCtasPerSm;
  }
}

struct DecodeParams {
  PagedAttentionArgs args;
  int32_t num_splits;
  float q_scale;        // scale * log2(e)
  float* partial_out;   // [num_seqs, num_heads, num_splits, head_dim]; null with one split
  float* partial_lse;   // [num_seqs, num_heads, num_splits]
};

// ---- device helpers ----

// 16 bytes global -> shared; src_bytes == 0 writes zeros and reads nothing.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- split kernel ----

// One CTA: the G query rows of one (sequence, kv_head) over one split's chunks.
template <typename T, int D, bool kChunkInBlock>
__global__ void __launch_bounds__(kThreads, Config<D>::kCtasPerSm)
    DecodeSplitKernel(const DecodeParams p) {
  using Cfg = Config<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float warp_max[kWarps][kRows];
  __shared__ float warp_sum[kWarps][kRows];
  const PagedAttentionArgs& args = p.args;
  const int num_kv_heads = args.cache.num_kv_heads;
  const int split = blockIdx.x % p.num_splits;
  const int kv_head = (blockIdx.x / p.num_splits) % num_kv_heads;
  const int seq = blockIdx.x / p.num_splits / num_kv_heads;
  const int token = args.query_start[seq];
  if (args.query_start[seq + 1] - token != 1) return;  // not a decode row: another kernel's
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int group = args.num_heads / num_kv_heads;

  // Keys [key_lo, key_hi) of the sequence; this split's chunks [split_lo, split_hi); this warp's
  // chunks split_lo + warp + kWarps * i, i < num_mine.
  const int seq_len = max(args.seq_lens[seq], 0);
  const int key_lo = args.sliding_window > 0 ? max(0, seq_len - args.sliding_window) : 0;
  const int key_hi = seq_len;
  const int chunk_lo = key_lo / kChunkKeys;
  const int chunk_hi = (key_hi + kChunkKeys - 1) / kChunkKeys;
  const int per_split = (chunk_hi - chunk_lo + p.num_splits - 1) / p.num_splits;
  const int split_lo = chunk_lo + split * per_split;
  const int split_hi = min(split_lo + per_split, chunk_hi);
  const int num_mine =
      split_hi - split_lo > warp ? (split_hi - split_lo - warp + kWarps - 1) / kWarps : 0;
  auto chunk_of = [&](int i) { return split_lo + warp + kWarps * i; };

  T* q_smem = reinterpret_cast<T*>(smem);
  const uint32_t q_addr = SharedAddress(q_smem);
  const uint32_t pipe_addr =
      SharedAddress(q_smem + Cfg::kQElems + warp * Cfg::kStages * Cfg::kStageElems);

  const int block_size = args.cache.block_size;
  const int64_t head_stride = int64_t{block_size} * D;
  const int64_t block_stride = head_stride * num_kv_heads;
  const int64_t head_offset = kv_head * head_stride;
  const int32_t* table = args.block_tables + int64_t{seq} * args.max_blocks_per_seq;
  const T* k_cache = static_cast<const T*>(args.cache.k);
  const T* v_cache = static_cast<const T*>(args.cache.v);

  // Block id for a chunk: the chunk's block (every lane the same), or, on the generic path, the
  // block of key row lane % 16 (-1 for a key outside [key_lo, key_hi): never looked up).
  auto load_block = [&](int chunk) -> int32_t {
    if constexpr (kChunkInBlock) {
      return __ldg(table + chunk * kChunkKeys / block_size);
    } else {
      const int key = chunk * kChunkKeys + lane % kChunkKeys;
      return key >= key_lo && key < key_hi ? __ldg(table + key / block_size) : -1;
    }
  };
  // Element offset in the cache: of the chunk's row 0 (fast path), or of key row lane % 16
  // (generic path, -1 when that key is outside the range).
  auto row_offset = [&](int chunk, int32_t block) -> int64_t {
    if constexpr (kChunkInBlock) {
      return block * block_stride + head_offset + int64_t{chunk * kChunkKeys % block_size} * D;
    } else {
      const int key = chunk * kChunkKeys + lane % kChunkKeys;
      return block < 0 ? int64_t{-1}
                       : block * block_stride + head_offset + int64_t{key % block_size} * D;
    }
  };
  // Queues the copies of one chunk's K and V rows into `stage`; rows outside the key range are
  // zero-filled (so P = 0 never meets a garbage V).
  auto issue = [&](int chunk, int stage, int64_t offset) {
    const uint32_t k_dst = pipe_addr + stage * Cfg::kStageElems * 2;
    const uint32_t v_dst = k_dst + Cfg::kTileElems * 2;
    const int unit = lane % Cfg::kUnits;
#pragma unroll
    for (int i = 0; i < Cfg::kUnitsPerLane; ++i) {
      const int row = lane / Cfg::kUnits + i * (32 / Cfg::kUnits);
      int64_t src;
      bool valid;
      if constexpr (kChunkInBlock) {
        const int key = chunk * kChunkKeys + row;
        valid = key >= key_lo && key < key_hi;
        src = offset + row * D;
      } else {
        src = __shfl_sync(0xffffffffu, offset, row);
        valid = src >= 0;
      }
      src = valid ? src + unit * 8 : 0;
      const uint32_t dst = SwizzledOffset<D>(row, unit) * 2;
      CpAsync16(k_dst + dst, k_cache + src, valid ? 16 : 0);
      CpAsync16(v_dst + dst, v_cache + src, valid ? 16 : 0);
    }
  };

  // Prologue: the block ids of the first kStages chunks, then kStages - 1 chunks in flight.
  int32_t first_blocks[Cfg::kStages];
#pragma unroll
  for (int st = 0; st < Cfg::kStages; ++st) {
    first_blocks[st] = st < num_mine ? load_block(chunk_of(st)) : 0;
  }
#pragma unroll
  for (int st = 0; st < Cfg::kStages - 1; ++st) {
    if (st < num_mine) issue(chunk_of(st), st, row_offset(chunk_of(st), first_blocks[st]));
    CpAsyncCommit();
  }
  int32_t next_block = first_blocks[Cfg::kStages - 1];

  // q rows of the group -> shared, times scale * log2(e), rounded to T; rows >= G are zero.
  const float* q = args.q + int64_t{token} * args.q_stride + int64_t{kv_head} * group * D;
  for (int idx = threadIdx.x; idx < kRows * Cfg::kUnits; idx += kThreads) {
    const int row = idx / Cfg::kUnits;
    const int unit = idx % Cfg::kUnits;
    uint32_t w[4] = {0, 0, 0, 0};
    if (row < group) {
      const float* src = q + row * D + unit * 8;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        w[k] = PackPairTo<T>(src[2 * k] * p.q_scale, src[2 * k + 1] * p.q_scale);
      }
    }
    *reinterpret_cast<uint4*>(q_smem + SwizzledOffset<D>(row, unit)) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
  __syncthreads();

  // ldmatrix row addresses of this lane (see the fragment layouts of mma.m16n8k16): matrices
  // 0..3 of an x4 load take their 8 row addresses from lanes 0-7, 8-15, 16-23, 24-31.
  const int a_row = lane % 8 + (lane / 8) % 2 * 8;  // Q (A) and V (B, transposed)
  const int a_unit = lane / 16;
  const int k_row = lane % 8 + lane / 16 * 8;       // K (B): keys 0-7 then 8-15
  const int k_unit = (lane / 8) % 2;

  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // rows lane / 4 and lane / 4 + 8
  float row_sum[2] = {0.0f, 0.0f};            // this lane's columns only until the end

  int read_stage = 0;
  int write_stage = Cfg::kStages - 1;
  for (int i = 0; i < num_mine; ++i) {
    __syncwarp();  // every lane is done reading the stage about to be overwritten
    const int ahead = i + Cfg::kStages - 1;
    if (ahead < num_mine) {
      issue(chunk_of(ahead), write_stage, row_offset(chunk_of(ahead), next_block));
      if (ahead + 1 < num_mine) next_block = load_block(chunk_of(ahead + 1));
    }
    CpAsyncCommit();
    CpAsyncWait<Cfg::kStages - 1>();
    __syncwarp();  // chunk i has landed for every lane

    const uint32_t k_base = pipe_addr + read_stage * Cfg::kStageElems * 2;
    const uint32_t v_base = k_base + Cfg::kTileElems * 2;
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4], b[4];
      LdMatrixX4(q_addr + SwizzledOffset<D>(a_row, 2 * kk + a_unit) * 2, a);
      LdMatrixX4(k_base + SwizzledOffset<D>(k_row, 2 * kk + k_unit) * 2, b);
      MmaM16N8K16<T>(s[0], a, b[0], b[1]);
      MmaM16N8K16<T>(s[1], a, b[2], b[3]);
    }
    // s[n][e]: row lane / 4 + (e / 2) * 8, key 8 * n + (lane % 4) * 2 + e % 2 of the chunk.
    const int key0 = chunk_of(i) * kChunkKeys;
    if (key0 < key_lo || key0 + kChunkKeys > key_hi) {
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * n + (lane % 4) * 2 + e % 2;
          if (key < key_lo || key >= key_hi) s[n][e] = -INFINITY;
        }
      }
    }
    float reference[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float chunk_max = QuadMaxOf(
          fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1])));
      const float new_max = fmaxf(row_max[r], chunk_max);
      reference[r] = new_max == -INFINITY ? 0.0f : new_max;  // no -inf - -inf
      const float correction = exp2f(row_max[r] - reference[r]);
      row_max[r] = new_max;
      row_sum[r] *= correction;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        acc[n][2 * r] *= correction;
        acc[n][2 * r + 1] *= correction;
      }
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - reference[e / 2]);
        row_sum[e / 2] += s[n][e];
      }
    }
    // P as the A operand: the score fragments of keys 0-7 and 8-15 are its k-halves.
    const uint32_t pa[4] = {PackPairTo<T>(s[0][0], s[0][1]), PackPairTo<T>(s[0][2], s[0][3]),
                            PackPairTo<T>(s[1][0], s[1][1]), PackPairTo<T>(s[1][2], s[1][3])};
#pragma unroll
    for (int dt = 0; dt < D / 16; ++dt) {
      uint32_t b[4];
      LdMatrixX4Trans(v_base + SwizzledOffset<D>(a_row, 2 * dt + a_unit) * 2, b);
      MmaM16N8K16<T>(acc[2 * dt], pa, b[0], b[1]);
      MmaM16N8K16<T>(acc[2 * dt + 1], pa, b[2], b[3]);
    }
    read_stage = read_stage + 1 == Cfg::kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == Cfg::kStages ? 0 : write_stage + 1;
  }
  CpAsyncWait<0>();
  row_sum[0] = QuadSumOf(row_sum[0]);
  row_sum[1] = QuadSumOf(row_sum[1]);

  // Merge the warps through shared memory (the scratch overlaps the K/V stages).
  __syncthreads();
  float* scratch = reinterpret_cast<float*>(smem + Cfg::kQElems * 2);
  {
    float* mine = scratch + warp * kRows * Cfg::kScratchStride;
    const int r = lane / 4;
    const int c = (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<float2*>(mine + r * Cfg::kScratchStride + 8 * n + c) =
          make_float2(acc[n][0], acc[n][1]);
      *reinterpret_cast<float2*>(mine + (r + 8) * Cfg::kScratchStride + 8 * n + c) =
          make_float2(acc[n][2], acc[n][3]);
    }
    if (lane % 4 == 0) {
      warp_max[warp][r] = row_max[0];
      warp_max[warp][r + 8] = row_max[1];
      warp_sum[warp][r] = row_sum[0];
      warp_sum[warp][r + 8] = row_sum[1];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * (D / 4); idx += kThreads) {
    const int g = idx / (D / 4);
    const int d = idx % (D / 4) * 4;
    float max_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) max_all = fmaxf(max_all, warp_max[w][g]);
    float total = 0.0f;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float m = warp_max[w][g];
      const float c = m == -INFINITY ? 0.0f : exp2f(m - max_all);  // a warp without keys: 0
      total += c * warp_sum[w][g];
      const float4 part =
          *reinterpret_cast<const float4*>(scratch + (w * kRows + g) * Cfg::kScratchStride + d);
      o.x += c * part.x;
      o.y += c * part.y;
      o.z += c * part.z;
      o.w += c * part.w;
    }
    const int head = kv_head * group + g;
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    if (p.num_splits == 1) {
      float* dst = args.out + int64_t{token} * args.out_stride + int64_t{head} * D + d;
      dst[0] = o.x * inv;
      dst[1] = o.y * inv;
      dst[2] = o.z * inv;
      dst[3] = o.w * inv;
    } else {
      const int64_t row = (int64_t{seq} * args.num_heads + head) * p.num_splits + split;
      if (total > 0.0f) {
        *reinterpret_cast<float4*>(p.partial_out + row * D + d) =
            make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
      }
      if (d == 0) p.partial_lse[row] = total > 0.0f ? max_all + log2f(total) : -INFINITY;
    }
  }
}

// ---- combine kernel ----

// One warp per (sequence, head) of a decode row: merges the splits' partial outputs.
template <int D>
__global__ void __launch_bounds__(kThreads) CombineSplitsKernel(const DecodeParams p) {
  const PagedAttentionArgs& args = p.args;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= args.num_seqs * args.num_heads) return;
  const int seq = row / args.num_heads;
  const int head = row % args.num_heads;
  const int token = args.query_start[seq];
  if (args.query_start[seq + 1] - token != 1) return;
  const int num_splits = p.num_splits;
  const float* lse = p.partial_lse + int64_t{row} * num_splits;
  const float* part = p.partial_out + int64_t{row} * num_splits * D;
  float max_lse = -INFINITY;
  for (int i = lane; i < num_splits; i += 32) max_lse = fmaxf(max_lse, lse[i]);
  max_lse = WarpMaxOf(max_lse);
  float total = 0.0f;
  for (int i = lane; i < num_splits; i += 32) {
    if (lse[i] != -INFINITY) total += exp2f(lse[i] - max_lse);
  }
  total = WarpSumOf(total);
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  float* out = args.out + int64_t{token} * args.out_stride + int64_t{head} * D;
  for (int d = lane * 4; d < D; d += 128) {
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int i = 0; i < num_splits; ++i) {
      const float l = lse[i];
      if (l == -INFINITY) continue;  // an empty split: its partial output was never written
      const float w = exp2f(l - max_lse);
      const float4 v = *reinterpret_cast<const float4*>(part + int64_t{i} * D + d);
      o.x += w * v.x;
      o.y += w * v.y;
      o.z += w * v.z;
      o.w += w * v.w;
    }
    out[d] = o.x * inv;
    out[d + 1] = o.y * inv;
    out[d + 2] = o.z * inv;
    out[d + 3] = o.w * inv;
  }
}

// ---- host ----

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Most splits the sizes allow on any device: each split of a max-length sequence gets at least
// kMinChunksPerSplit chunks, and at most kMaxSplits.
int64_t SplitCap(int32_t max_seq_len) {
  return std::min<int64_t>(kMaxSplits, CeilDiv(max_seq_len, kChunkKeys) / kMinChunksPerSplit);
}

template <typename T, int D>
cudaError_t Launch(const DecodeParams& p, int64_t num_ctas, cudaStream_t stream) {
  using Cfg = Config<D>;
  const bool chunk_in_block = p.args.cache.block_size % kChunkKeys == 0;
  void (*kernel)(DecodeParams) =
      chunk_in_block ? DecodeSplitKernel<T, D, true> : DecodeSplitKernel<T, D, false>;
  cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (error != cudaSuccess) return error;
  kernel<<<static_cast<unsigned>(num_ctas), kThreads, Cfg::kSmemBytes, stream>>>(p);
  error = cudaGetLastError();
  if (error != cudaSuccess || p.num_splits == 1) return error;
  const int64_t rows = int64_t{p.args.num_seqs} * p.args.num_heads;
  CombineSplitsKernel<D><<<static_cast<unsigned>(CeilDiv(rows, kWarps)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchForHeadDim(const DecodeParams& p, int64_t num_ctas, cudaStream_t stream) {
  switch (p.args.cache.head_dim) {
    case 64: return Launch<T, 64>(p, num_ctas, stream);
    case 128: return Launch<T, 128>(p, num_ctas, stream);
    case 256: return Launch<T, 256>(p, num_ctas, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool DecodeAttentionSupports(const PagedAttentionArgs& args) {
  const PagedKvView& cache = args.cache;
  const bool dtype_ok = cache.dtype == DType::kBF16 || cache.dtype == DType::kF16;
  const bool head_dim_ok = cache.head_dim == 64 || cache.head_dim == 128 || cache.head_dim == 256;
  const bool heads_ok = cache.num_kv_heads >= 1 && args.num_heads >= 1 &&
                        args.num_heads % cache.num_kv_heads == 0 &&
                        args.num_heads / cache.num_kv_heads <= kDecodeAttentionMaxGroup;
  const bool aligned = reinterpret_cast<uintptr_t>(cache.k) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(cache.v) % 16 == 0;
  return dtype_ok && head_dim_ok && heads_ok && cache.block_size >= 1 && aligned;
}

int32_t DecodeAttentionNumSplits(int32_t num_seqs, int32_t num_kv_heads, int32_t head_dim,
                                 int32_t max_seq_len, int32_t sm_count) {
  if (num_seqs <= 0 || num_kv_heads <= 0 || max_seq_len <= 0 || sm_count <= 0) return 1;
  const int64_t base = int64_t{num_seqs} * num_kv_heads;
  const int64_t cap = std::min<int64_t>(SplitCap(max_seq_len), kMaxSplitCtas / base);
  const int64_t wave = int64_t{sm_count} * CtasPerSm(head_dim);
  if (cap <= 1 || 5 * base >= 4 * wave) return 1;
  auto efficiency = [&](int64_t splits) {
    const int64_t ctas = base * splits;
    return static_cast<double>(ctas) / static_cast<double>(CeilDiv(ctas, wave) * wave);
  };
  double best = 0.0;
  for (int64_t s = 1; s <= cap; ++s) best = std::max(best, efficiency(s));
  for (int64_t s = 1; s <= cap; ++s) {
    if (efficiency(s) >= 0.85 * best) return static_cast<int32_t>(s);
  }
  return 1;
}

size_t DecodeAttentionWorkspaceBytes(int32_t num_seqs, int32_t num_heads, int32_t head_dim,
                                     int32_t max_seq_len) {
  if (num_seqs <= 0 || num_heads <= 0 || head_dim <= 0 || max_seq_len <= 0) return 0;
  const int64_t cap = SplitCap(max_seq_len);
  if (cap <= 1) return 0;
  // With more than one split, num_seqs * num_kv_heads * splits <= kMaxSplitCtas, so the partial
  // rows num_seqs * num_heads * splits are at most kMaxSplitCtas * group.
  const int64_t group_cap = std::min<int64_t>(num_heads, kDecodeAttentionMaxGroup);
  const int64_t rows = std::min(int64_t{num_seqs} * num_heads * cap, kMaxSplitCtas * group_cap);
  return static_cast<size_t>(rows) * (static_cast<size_t>(head_dim) + 1) * sizeof(float);
}

cudaError_t DecodeAttention(const PagedAttentionArgs& args, int32_t max_seq_len, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream) {
  if (!DecodeAttentionSupports(args) || args.num_seqs < 0 || max_seq_len < 0 ||
      args.max_blocks_per_seq < 0) {
    return cudaErrorInvalidValue;
  }
  if (args.num_seqs == 0) return cudaSuccess;
  int device = 0, sm_count = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return error;
  error = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (error != cudaSuccess) return error;
  const int32_t head_dim = args.cache.head_dim;
  const int32_t num_splits = DecodeAttentionNumSplits(args.num_seqs, args.cache.num_kv_heads,
                                                      head_dim, max_seq_len, sm_count);
  DecodeParams p{args, num_splits, args.scale * kLog2e, nullptr, nullptr};
  if (num_splits > 1) {
    const int64_t rows = int64_t{args.num_seqs} * args.num_heads * num_splits;
    const size_t need = static_cast<size_t>(rows) * (static_cast<size_t>(head_dim) + 1) * 4;
    if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 16 != 0 ||
        workspace_bytes < need) {
      return cudaErrorInvalidValue;
    }
    p.partial_out = static_cast<float*>(workspace);
    p.partial_lse = p.partial_out + rows * head_dim;
  }
  const int64_t num_ctas = int64_t{args.num_seqs} * args.cache.num_kv_heads * num_splits;
  if (num_ctas > 0x7fffffff) return cudaErrorInvalidValue;
  return args.cache.dtype == DType::kBF16
             ? LaunchForHeadDim<__nv_bfloat16>(p, num_ctas, stream)
             : LaunchForHeadDim<__half>(p, num_ctas, stream);
}

}  // namespace loom::cuda
