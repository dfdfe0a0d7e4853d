// Split-KV decode attention over fp8 and low-bit KV caches, GQA group on the tensor cores
// (contract in decode_attention_kv.h).
//
// Math: that of decode_attention.cu. For one (sequence, kv_head) the G query rows form Q
// [16, head_dim] (rows >= G zero), times scale * log2(e), rounded to T (bf16 for the low-bit
// formats, whose tails are bf16; f16 for fp8, which converts to f16 exactly). Keys [first, p] are
// cut into 16-key chunks at absolute positions 16c .. 16c + 15, dealt to `num_splits` CTAs in
// contiguous runs; each warp keeps an online softmax in base 2 over its chunks, the CTA merges its
// warps, and with several splits a combine kernel merges the splits by their log-sum-exps.
//
// Who owns what. Grid: one CTA of 4 warps per (sequence, kv_head, split). Per chunk, a warp fills
// its own K and V tiles ([16][head_dim] of T, row-XOR swizzled, in shared memory): each lane
// takes head_dim / 64 items of (key row, 32-element chunk of the row) per tile and, for a key in
// range, reads
//   a packed row:  the chunk's 32 codes (32, 16 or 8 bytes: one or two 16-byte loads, or one
//                  8-byte load), unpacked with shifts and masks (kv_format_inl.cuh), and the
//                  group parameters (per token: one scale and zero; per channel: the chunk's 32
//                  scales and 32 zeros), x = code * scale + zero in f32, rounded to bf16;
//   a tail row:    64 bytes of bf16, copied;
//   an fp8 row:    32 bytes, converted pairwise with cvt.rn.f16x2.e4m3x2;
// and a key outside [first, p] writes zeros (its score is masked to -inf; V must stay finite).
// The row of every key is looked up on its own (block table, full block or tail), so any
// block_size works and a chunk may straddle blocks. Then S = Q K^T with ldmatrix +
// mma.m16n8k16, the softmax in registers, and O += P V with P reused from the score registers as
// the A operand and V through ldmatrix.trans, as in decode_attention.cu.
//
// Bytes moved per (sequence, kv_head): keys * (2 * row_bytes) of codes for full blocks (row_bytes
// = head_dim * bits / 8), their parameters (per token: 4 bytes per key for K and for V; per
// channel K: 4 * head_dim per block, read once per chunk from L1/L2), 4 * head_dim per tail row,
// 2 * head_dim per fp8 key; each byte once per GQA group. Plus q, out and the split partials as in
// decode_attention.cu. Shared memory per CTA: 2 * 16 * head_dim (q) + max(4 warps * 2 tiles * 32 *
// head_dim, the f32 merge scratch 4 * 16 * (head_dim + 8) * 4): 38 KiB for head_dim 128.
//
// What is left for speed: the loads of chunk i + 1 are not issued before chunk i's products (the
// warps of a CTA and the CTAs of an SM hide the latency instead), and a chunk's codes are
// dequantized into shared memory rather than straight into the mma B fragments.
#include "kernels/cuda/decode_attention_kv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/decode_attention.h"
#include "kernels/cuda/kv_format_inl.cuh"
#include "kernels/cuda/mma_inl.cuh"

namespace loom::cuda {
namespace {

using internal::KvGeometry;
using internal::KvRowRef;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunkKeys = 16;  // keys per warp step
constexpr int kRows = 16;       // query rows of the mma tile (the group, zero-padded)
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct Config {
  static_assert(D == 64 || D == 128 || D == 256);
  static constexpr int kUnits = D / 8;              // 16-byte units per row
  static constexpr int kChunksPerRow = D / kKvPackChunk;
  static constexpr int kItemsPerLane = kChunkKeys * kChunksPerRow / 32;
  static constexpr int kTileElems = kChunkKeys * D;
  static constexpr int kWarpElems = 2 * kTileElems;  // K tile, then V tile
  static constexpr int kQElems = kRows * D;
  static constexpr int kScratchStride = D + 8;
  static constexpr int kTileBytes = kWarps * kWarpElems * 2;
  static constexpr int kScratchBytes = kWarps * kRows * kScratchStride * 4;
  static constexpr int kSmemBytes = kQElems * 2 + std::max(kTileBytes, kScratchBytes);
};

struct KvDecodeParams {
  PagedAttentionArgs args;
  KvGeometry geo;
  int32_t num_splits;
  float q_scale;       // scale * log2(e)
  float* partial_out;  // [num_seqs, num_heads, num_splits, head_dim]; null with one split
  float* partial_lse;  // [num_seqs, num_heads, num_splits]
};

// Elements [32 c, 32 c + 32) of one cached row as 16 pairs of T (element 2k in the low half of
// out[k]); zeros when !valid. kBits: 0 for fp8, else the low-bit code width.
template <typename T, int kBits>
__device__ __forceinline__ void LoadRowChunk(const KvRowRef& row, int c, bool valid,
                                             uint32_t (&out)[16]) {
  if (!valid) {
#pragma unroll
    for (int k = 0; k < 16; ++k) out[k] = 0;
    return;
  }
  if constexpr (kBits == 0) {
    // fp8 E4M3 bytes -> f16 pairs, exact.
    const uint4* src = reinterpret_cast<const uint4*>(row.row + c * kKvPackChunk);
    const uint4 a = src[0], b = src[1];
    const uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      out[2 * k] = internal::Fp8PairToHalf2Bits(static_cast<uint16_t>(words[k] & 0xffffu));
      out[2 * k + 1] = internal::Fp8PairToHalf2Bits(static_cast<uint16_t>(words[k] >> 16));
    }
  } else {
    if (row.kind == KvRowRef::kTail) {
      const uint4* src = reinterpret_cast<const uint4*>(row.row + c * kKvPackChunk * 2);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const uint4 v = src[u];
        out[4 * u] = v.x, out[4 * u + 1] = v.y, out[4 * u + 2] = v.z, out[4 * u + 3] = v.w;
      }
      return;
    }
    uint32_t codes[8];
    internal::KvUnpackChunk<kBits>(row.row, c, codes);
    // Scales and zeros as f16 pairs: element 2k's in the low half of word k.
    uint32_t scale[16], zero[16];
    if (row.param_step == 0) {
      const uint32_t s = row.scales[row.param_base];
      const uint32_t z = row.scales[row.num_params + row.param_base];
#pragma unroll
      for (int k = 0; k < 16; ++k) scale[k] = s | (s << 16), zero[k] = z | (z << 16);
    } else {
      const uint4* s = reinterpret_cast<const uint4*>(row.scales + c * kKvPackChunk);
      const uint4* z =
          reinterpret_cast<const uint4*>(row.scales + row.num_params + c * kKvPackChunk);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const uint4 sv = s[u], zv = z[u];
        scale[4 * u] = sv.x, scale[4 * u + 1] = sv.y;
        scale[4 * u + 2] = sv.z, scale[4 * u + 3] = sv.w;
        zero[4 * u] = zv.x, zero[4 * u + 1] = zv.y, zero[4 * u + 2] = zv.z, zero[4 * u + 3] = zv.w;
      }
    }
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const int e0 = 2 * k, e1 = 2 * k + 1;
      const float c0 = static_cast<float>((codes[e0 / 4] >> (8 * (e0 % 4))) & 0xffu);
      const float c1 = static_cast<float>((codes[e1 / 4] >> (8 * (e1 % 4))) & 0xffu);
      const float x0 = c0 * internal::HalfBitsToF32(scale[k] & 0xffffu) +
                       internal::HalfBitsToF32(zero[k] & 0xffffu);
      const float x1 = c1 * internal::HalfBitsToF32(scale[k] >> 16) +
                       internal::HalfBitsToF32(zero[k] >> 16);
      out[k] = internal::PackPairTo<T>(x0, x1);
    }
  }
}

// Fills this warp's K and V tiles with the 16 keys of `chunk` (see the file comment).
template <typename T, int D, int kBits>
__device__ __forceinline__ void FillTiles(const KvDecodeParams& p, const int32_t* table,
                                          int seq_len, int tail_slot, int tail_first,
                                          int kv_head, int key_lo,
                                          int key_hi, int chunk, T* k_tile, T* v_tile) {
  using Cfg = Config<D>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < Cfg::kItemsPerLane; ++i) {
    const int item = lane + 32 * i;
    const int r = item / Cfg::kChunksPerRow;
    const int c = item % Cfg::kChunksPerRow;
    const int key = chunk * kChunkKeys + r;
    const bool valid = key >= key_lo && key < key_hi;
#pragma unroll
    for (int is_v = 0; is_v < 2; ++is_v) {
      KvRowRef row{};
      if (valid) {
        row = internal::KvRowOf(p.args.cache, p.geo, table, seq_len, tail_slot, tail_first,
                                is_v != 0, key, kv_head);
      }
      uint32_t w[16];
      LoadRowChunk<T, kBits>(row, c, valid, w);
      T* tile = is_v ? v_tile : k_tile;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        *reinterpret_cast<uint4*>(tile + internal::SwizzledOffset<D>(r, 4 * c + u)) =
            make_uint4(w[4 * u], w[4 * u + 1], w[4 * u + 2], w[4 * u + 3]);
      }
    }
  }
}

// One CTA: the G query rows of one (sequence, kv_head) over one split's chunks.
template <typename T, int D, int kBits>
__global__ void __launch_bounds__(kThreads) DecodeKvSplitKernel(const KvDecodeParams p) {
  using Cfg = Config<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float warp_max[kWarps][kRows];
  __shared__ float warp_sum[kWarps][kRows];
  const PagedAttentionArgs& args = p.args;
  const int num_kv_heads = p.geo.num_kv_heads;
  const int split = blockIdx.x % p.num_splits;
  const int kv_head = (blockIdx.x / p.num_splits) % num_kv_heads;
  const int seq = blockIdx.x / p.num_splits / num_kv_heads;
  const int token = args.query_start[seq];
  if (args.query_start[seq + 1] - token != 1) return;  // not a decode row: another kernel's
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int group = args.num_heads / num_kv_heads;

  // Keys [key_lo, key_hi); this split's chunks [split_lo, split_hi); this warp's chunks
  // split_lo + warp + kWarps * i, i < num_mine.
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
  const int32_t* table = args.block_tables + int64_t{seq} * args.max_blocks_per_seq;
  const int tail_slot = args.tail_slots != nullptr ? args.tail_slots[seq] : -1;
  const int tail_first = args.tail_first_blocks != nullptr ? args.tail_first_blocks[seq] : 0;

  T* q_smem = reinterpret_cast<T*>(smem);
  T* k_tile = q_smem + Cfg::kQElems + warp * Cfg::kWarpElems;
  T* v_tile = k_tile + Cfg::kTileElems;
  const uint32_t q_addr = internal::SharedAddress(q_smem);
  const uint32_t k_base = internal::SharedAddress(k_tile);
  const uint32_t v_base = internal::SharedAddress(v_tile);

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
        w[k] = internal::PackPairTo<T>(src[2 * k] * p.q_scale, src[2 * k + 1] * p.q_scale);
      }
    }
    *reinterpret_cast<uint4*>(q_smem + internal::SwizzledOffset<D>(row, unit)) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
  __syncthreads();

  // ldmatrix row addresses of this lane: matrices 0..3 of an x4 load take their 8 row addresses
  // from lanes 0-7, 8-15, 16-23, 24-31.
  const int a_row = lane % 8 + (lane / 8) % 2 * 8;  // Q (A) and V (B, transposed)
  const int a_unit = lane / 16;
  const int k_row = lane % 8 + lane / 16 * 8;       // K (B): keys 0-7 then 8-15
  const int k_unit = (lane / 8) % 2;

  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // rows lane / 4 and lane / 4 + 8
  float row_sum[2] = {0.0f, 0.0f};            // this lane's columns only until the end

  for (int i = 0; i < num_mine; ++i) {
    const int chunk = split_lo + warp + kWarps * i;
    __syncwarp();  // every lane is done reading the previous chunk's tiles
    FillTiles<T, D, kBits>(p, table, seq_len, tail_slot, tail_first, kv_head, key_lo, key_hi, chunk, k_tile,
                           v_tile);
    __syncwarp();  // the tiles are written for every lane

    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4], b[4];
      internal::LdMatrixX4(q_addr + internal::SwizzledOffset<D>(a_row, 2 * kk + a_unit) * 2, a);
      internal::LdMatrixX4(k_base + internal::SwizzledOffset<D>(k_row, 2 * kk + k_unit) * 2, b);
      internal::MmaM16N8K16<T>(s[0], a, b[0], b[1]);
      internal::MmaM16N8K16<T>(s[1], a, b[2], b[3]);
    }
    // s[n][e]: row lane / 4 + (e / 2) * 8, key 8 * n + (lane % 4) * 2 + e % 2 of the chunk.
    const int key0 = chunk * kChunkKeys;
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
      const float chunk_max = internal::QuadMaxOf(
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
    const uint32_t pa[4] = {
        internal::PackPairTo<T>(s[0][0], s[0][1]), internal::PackPairTo<T>(s[0][2], s[0][3]),
        internal::PackPairTo<T>(s[1][0], s[1][1]), internal::PackPairTo<T>(s[1][2], s[1][3])};
#pragma unroll
    for (int dt = 0; dt < D / 16; ++dt) {
      uint32_t b[4];
      internal::LdMatrixX4Trans(v_base + internal::SwizzledOffset<D>(a_row, 2 * dt + a_unit) * 2,
                                b);
      internal::MmaM16N8K16<T>(acc[2 * dt], pa, b[0], b[1]);
      internal::MmaM16N8K16<T>(acc[2 * dt + 1], pa, b[2], b[3]);
    }
  }
  row_sum[0] = internal::QuadSumOf(row_sum[0]);
  row_sum[1] = internal::QuadSumOf(row_sum[1]);

  // Merge the warps through shared memory (the scratch overlaps the tiles).
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

// One warp per (sequence, head) of a decode row: merges the splits' partial outputs.
template <int D>
__global__ void __launch_bounds__(kThreads) CombineKvSplitsKernel(const KvDecodeParams p) {
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
  max_lse = internal::WarpMaxOf(max_lse);
  float total = 0.0f;
  for (int i = lane; i < num_splits; i += 32) {
    if (lse[i] != -INFINITY) total += exp2f(lse[i] - max_lse);
  }
  total = internal::WarpSumOf(total);
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

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <typename T, int D, int kBits>
cudaError_t Launch(const KvDecodeParams& p, int64_t num_ctas, cudaStream_t stream) {
  using Cfg = Config<D>;
  void (*kernel)(KvDecodeParams) = DecodeKvSplitKernel<T, D, kBits>;
  cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (error != cudaSuccess) return error;
  kernel<<<static_cast<unsigned>(num_ctas), kThreads, Cfg::kSmemBytes, stream>>>(p);
  error = cudaGetLastError();
  if (error != cudaSuccess || p.num_splits == 1) return error;
  const int64_t rows = int64_t{p.args.num_seqs} * p.args.num_heads;
  CombineKvSplitsKernel<D>
      <<<static_cast<unsigned>(CeilDiv(rows, kWarps)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <int D>
cudaError_t LaunchForFormat(const KvDecodeParams& p, int64_t num_ctas, cudaStream_t stream) {
  switch (p.args.cache.dtype) {
    case DType::kF8E4M3: return Launch<__half, D, 0>(p, num_ctas, stream);
    case DType::kKvInt8: return Launch<__nv_bfloat16, D, 8>(p, num_ctas, stream);
    case DType::kKvInt4: return Launch<__nv_bfloat16, D, 4>(p, num_ctas, stream);
    case DType::kKvInt2: return Launch<__nv_bfloat16, D, 2>(p, num_ctas, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool DecodeAttentionKvSupports(const PagedAttentionArgs& args) {
  const PagedKvView& cache = args.cache;
  const int32_t bs = cache.block_size;
  const bool format_ok =
      (cache.dtype == DType::kF8E4M3 && bs >= 1) ||
      (cache.low_bit() && (bs == 16 || bs == 32 || bs == 64 || bs == 128) &&
       Aligned16(cache.tail_k) && Aligned16(cache.tail_v));
  const bool head_dim_ok = cache.head_dim == 64 || cache.head_dim == 128 || cache.head_dim == 256;
  const bool heads_ok = cache.num_kv_heads >= 1 && args.num_heads >= 1 &&
                        args.num_heads % cache.num_kv_heads == 0 &&
                        args.num_heads / cache.num_kv_heads <= kDecodeAttentionMaxGroup;
  return format_ok && head_dim_ok && heads_ok && Aligned16(cache.k) && Aligned16(cache.v);
}

cudaError_t DecodeAttentionKv(const PagedAttentionArgs& args, int32_t max_seq_len,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (!DecodeAttentionKvSupports(args) || args.num_seqs < 0 || max_seq_len < 0 ||
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
  KvDecodeParams p{args, internal::KvGeometryOf(args.cache), num_splits, args.scale * kLog2e,
                   nullptr, nullptr};
  if (num_splits > 1) {
    const int64_t rows = int64_t{args.num_seqs} * args.num_heads * num_splits;
    const size_t need = static_cast<size_t>(rows) * (static_cast<size_t>(head_dim) + 1) * 4;
    if (workspace == nullptr || !Aligned16(workspace) || workspace_bytes < need) {
      return cudaErrorInvalidValue;
    }
    p.partial_out = static_cast<float*>(workspace);
    p.partial_lse = p.partial_out + rows * head_dim;
  }
  const int64_t num_ctas = int64_t{args.num_seqs} * args.cache.num_kv_heads * num_splits;
  if (num_ctas > 0x7fffffff) return cudaErrorInvalidValue;
  switch (head_dim) {
    case 64: return LaunchForFormat<64>(p, num_ctas, stream);
    case 128: return LaunchForFormat<128>(p, num_ctas, stream);
    default: return LaunchForFormat<256>(p, num_ctas, stream);
  }
}

}  // namespace loom::cuda
