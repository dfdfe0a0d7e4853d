// AMX-BF16 GEMM for bf16 weights, with the weight read in place from the checkpoint mapping.
//
// Math: y^T = W · x^T. A bf16 weight [n, k] row-major is already the A-operand layout of
// TDPBF16PS: 16 rows of W by 32 k (64 bytes) per tile, row stride k * 2 bytes, loaded straight
// from the mapping. x is the B operand: it is converted from f32 once per call and packed into the
// VNNI layout (tile row r holds the k pair (2r, 2r + 1) of 16 tokens), so
//   C[n][i] += sum_r W[n][2r] * x[i][2r] + W[n][2r + 1] * x[i][2r + 1]
// with f32 accumulation, and each 16×16 C tile is transposed on its way into y.
// MatmulPrecision::kHighest splits x = x_hi + x_mid + x_lo (all bf16: x_hi = bf16(x), x_mid =
// bf16(x - x_hi), x_lo = bf16(x - x_hi - x_mid); the three hold x's 24 significant bits, so the
// split is exact for every normal f32 whose last part is not below bf16's normal range) and
// issues three TDPBF16PS per weight tile into the same accumulator: products of bf16 weights are
// exact, so the result is an f32 sum like the FMA paths', and a token's output does not depend on
// which path its batch took beyond f32 summation order. Two parts (x_hi + x_mid) were ~2^-17
// relative per product: on a Xeon with AMX, logits of the same token computed by the GEMV (a
// small batch) and by the tiles (a large one) then differed by ~2.5e-5 on magnitudes near 10.
// kBf16 packs x_hi only.
//
// Ownership: threads split the concatenated weight rows of the group in units of 32 rows (two A
// tiles); each thread computes all m for its rows, so no two threads write the same y element.
// Per 32 rows × 32 tokens block the four C tiles live in tmm0-3, the two weight tiles in tmm4-5
// and x tiles (one part at a time) in tmm6-7. Rows past the last full 16 of a weight go to the AVX-512 dot kernel
// (GemmRowsAvx512); groups with f16/f32 weights never come here (the dispatcher runs them on the
// AVX-512 panel GEMM). A k tail (k % 32) is copied with zero padding into a per-thread 16×32
// scratch tile, so nothing is read past a row, odd k included.
//
// Loop nest per thread: m0 (kMc tokens) > k chunk (kChunkBlocks × 32) > 32 weight rows >
// 32 tokens > k blocks. The packed x of one chunk (kMc × chunk × 2 bytes × parts) stays in L2
// while the thread's weight rows stream past; each weight byte is read from memory ceil(m / kMc)
// times, x (packed) once from memory and from L2 after that.
//
// Workspace (GemmAmxWorkspaceBytes): packed x, ceil(m/16) × ceil(k/32) × parts tiles of 1 KiB,
// then per thread a 2 KiB k-tail weight scratch and a 4 KiB C staging area.
//
// The tile instructions are the inline functions of amx_tiles.h (one inline asm instruction each:
// gcc 12 miscompiles the tile intrinsics, see there), so the ISA-emulation build can run this file
// on its scalar tile model.
#include "kernels/cpu/x86_intrinsics.h"

// gcc 12's AVX-512 headers build some results from a deliberately uninitialised register and then
// warn about it once inlined (a false positive in the headers, not in this file).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/matmul_internal.h"

namespace loom::cpu::matmul_internal {
namespace {

using amx::TileConfig;
using amx::TileDpBf16;
using amx::TileLoad;
using amx::TileLoadConfig;
using amx::TileRelease;
using amx::TileStore;
using amx::TileZero;

constexpr int64_t kTileBytes = 1024;        // 16 rows × 64 bytes
constexpr int64_t kTileK = 32;              // bf16 elements of k per tile row
constexpr int64_t kMc = 256;                // tokens per x block (multiple of 32)
// k blocks of 32 per chunk: the packed x of kMc tokens × one chunk is 1 MiB (L2 holds 2 MiB on
// the Xeons with AMX) with three parts and with one.
constexpr int64_t kChunkBlocksSplit = 21;   // x_hi + x_mid + x_lo
constexpr int64_t kChunkBlocksSingle = 64;  // x_hi only
constexpr int kSplitParts = 3;
constexpr int64_t kThreadScratchBytes = 6 * kTileBytes;

// All eight tiles are 16 rows × 64 bytes.
void LoadTileConfig() {
  TileConfig config;
  std::memset(&config, 0, sizeof(config));
  config.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  TileLoadConfig(config);
}

// In-register transpose of a 16×16 matrix of 32-bit elements (row i in r[i]).
void Transpose16x16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // s[4i + q], 128-bit lane l: rows 4i..4i+3 of column 4l + q.
  __m512i s[16];
  for (int i = 0; i < 4; ++i) {
    s[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    s[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    s[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    s[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // Output row 4l + q gathers lane l of s[q], s[4 + q], s[8 + q], s[12 + q].
  for (int q = 0; q < 4; ++q) {
    const __m512i u0 = _mm512_shuffle_i32x4(s[q], s[4 + q], 0x44);
    const __m512i u1 = _mm512_shuffle_i32x4(s[q], s[4 + q], 0xee);
    const __m512i u2 = _mm512_shuffle_i32x4(s[8 + q], s[12 + q], 0x44);
    const __m512i u3 = _mm512_shuffle_i32x4(s[8 + q], s[12 + q], 0xee);
    r[q] = _mm512_shuffle_i32x4(u0, u2, 0x88);
    r[4 + q] = _mm512_shuffle_i32x4(u0, u2, 0xdd);
    r[8 + q] = _mm512_shuffle_i32x4(u1, u3, 0x88);
    r[12 + q] = _mm512_shuffle_i32x4(u1, u3, 0xdd);
  }
}

// f32 -> bf16 bits in the high half of each lane (low half zero), round to nearest even; NaN
// stays NaN. As an f32 the result is bf16(v) exactly.
__m512i RoundToBf16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512i quiet = _mm512_or_si512(bits, _mm512_set1_epi32(0x00400000));
  return _mm512_and_si512(_mm512_mask_mov_epi32(rounded, nan, quiet),
                          _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
}

// 32 bf16 (high halves of lo's and hi's lanes, in order) packed into 16 dwords: dword r holds
// elements 2r (low half) and 2r + 1 (high half), the VNNI pair of k.
__m512i PackPairs(__m512i lo, __m512i hi) {
  const __m512i odd_words =
      _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(lo, odd_words, hi);
}

// The packed x of one call: tile (group g of 16 tokens, k block b, part p) at
// ((g * num_blocks + b) * num_parts + p) * kTileBytes; part 0 is x_hi, then x_mid and x_lo.
struct PackedX {
  uint8_t* data;
  int64_t num_groups;
  int64_t num_blocks;
  int64_t num_parts;
  int64_t group_stride() const { return num_blocks * num_parts * kTileBytes; }
  uint8_t* tile(int64_t g, int64_t b) const {
    return data + g * group_stride() + b * num_parts * kTileBytes;
  }
};

// Packs the tiles of token group g (zero past m and past k).
void PackGroup(const MatmulInput& x, int64_t g, const PackedX& packed) {
  const int64_t num_tokens = x.m - g * 16 < 16 ? x.m - g * 16 : 16;
  for (int64_t b = 0; b < packed.num_blocks; ++b) {
    const int64_t k0 = b * kTileK;
    const int64_t k_left = x.k - k0;
    const __mmask16 mask0 = k_left >= 16 ? 0xffff : static_cast<__mmask16>((1u << k_left) - 1u);
    const __mmask16 mask1 =
        k_left >= 32 ? 0xffff
                     : (k_left <= 16 ? 0 : static_cast<__mmask16>((1u << (k_left - 16)) - 1u));
    // parts[p][c]: part p of token c's 32 values, as VNNI pairs.
    __m512i parts[kSplitParts][16];
    for (int64_t c = 0; c < 16; ++c) {
      if (c >= num_tokens) {
        for (int64_t p = 0; p < packed.num_parts; ++p) parts[p][c] = _mm512_setzero_si512();
        continue;
      }
      const float* row = x.data + (g * 16 + c) * x.stride + k0;
      __m512 rest0 = _mm512_maskz_loadu_ps(mask0, row);
      __m512 rest1 = _mm512_maskz_loadu_ps(mask1, row + 16);
      for (int64_t p = 0; p < packed.num_parts; ++p) {
        const __m512i h0 = RoundToBf16(rest0);
        const __m512i h1 = RoundToBf16(rest1);
        parts[p][c] = PackPairs(h0, h1);
        // Exact: rest and its bf16 rounding share their leading bits.
        rest0 = _mm512_sub_ps(rest0, _mm512_castsi512_ps(h0));
        rest1 = _mm512_sub_ps(rest1, _mm512_castsi512_ps(h1));
      }
    }
    uint8_t* tile = packed.tile(g, b);
    for (int64_t p = 0; p < packed.num_parts; ++p) {
      Transpose16x16(parts[p]);
      for (int r = 0; r < 16; ++r) _mm512_storeu_si512(tile + p * kTileBytes + r * 64, parts[p][r]);
    }
  }
}

// One block of up to 32 weight rows × 32 tokens over k blocks [block_begin, block_end).
struct BlockArgs {
  const uint8_t* w;        // weight row n0, k = 0
  int64_t w_stride;        // bytes between weight rows (k * 2)
  const uint8_t* x_tiles;  // packed tile (first group, k block 0)
  int64_t x_group_stride;  // bytes between token groups
  int64_t num_parts;       // 3: x_hi, x_mid and x_lo tiles follow each other
  int64_t block_begin;
  int64_t block_end;
  int64_t num_full_blocks;  // k / 32; block num_full_blocks is the zero-padded tail
  const uint8_t* w_tail;    // the k tail of the block's weight rows, 16×64 bytes per group
  float* c_stage;           // 4 C tiles of 16×16 f32
};

// C[ng][mg] (tile 2 ng + mg) += A[ng] · B(x tile at xt, group mg).
template <int kNg, int kMg>
inline void MultiplyPart(const uint8_t* xt, int64_t group_stride) {
  TileLoad<6>(xt, 64);
  TileDpBf16<0, 4, 6>();
  if constexpr (kNg == 2) TileDpBf16<2, 5, 6>();
  if constexpr (kMg == 2) {
    TileLoad<7>(xt + group_stride, 64);
    TileDpBf16<1, 4, 7>();
    if constexpr (kNg == 2) TileDpBf16<3, 5, 7>();
  }
}

template <int kNg, int kMg, bool kSplit>
inline void MultiplyBlock(const uint8_t* xt, int64_t group_stride) {
  MultiplyPart<kNg, kMg>(xt, group_stride);
  if constexpr (kSplit) {
    MultiplyPart<kNg, kMg>(xt + kTileBytes, group_stride);
    MultiplyPart<kNg, kMg>(xt + 2 * kTileBytes, group_stride);
  }
}

template <int kNg, int kMg, bool kSplit>
void ComputeBlock(const BlockArgs& a) {
  TileZero<0>();
  if constexpr (kMg == 2) TileZero<1>();
  if constexpr (kNg == 2) TileZero<2>();
  if constexpr (kNg == 2 && kMg == 2) TileZero<3>();
  const int64_t x_block_bytes = a.num_parts * kTileBytes;
  const int64_t full_end = a.block_end < a.num_full_blocks ? a.block_end : a.num_full_blocks;
  for (int64_t b = a.block_begin; b < full_end; ++b) {
    TileLoad<4>(a.w + b * 64, a.w_stride);
    if constexpr (kNg == 2) TileLoad<5>(a.w + 16 * a.w_stride + b * 64, a.w_stride);
    MultiplyBlock<kNg, kMg, kSplit>(a.x_tiles + b * x_block_bytes, a.x_group_stride);
  }
  if (a.block_end > a.num_full_blocks) {
    TileLoad<4>(a.w_tail, 64);
    if constexpr (kNg == 2) TileLoad<5>(a.w_tail + kTileBytes, 64);
    MultiplyBlock<kNg, kMg, kSplit>(a.x_tiles + a.num_full_blocks * x_block_bytes,
                                    a.x_group_stride);
  }
  TileStore<0>(a.c_stage, 64);
  if constexpr (kMg == 2) TileStore<1>(a.c_stage + 256, 64);
  if constexpr (kNg == 2) TileStore<2>(a.c_stage + 512, 64);
  if constexpr (kNg == 2 && kMg == 2) TileStore<3>(a.c_stage + 768, 64);
}

using ComputeBlockFn = void (*)(const BlockArgs&);

ComputeBlockFn PickComputeBlock(int ng, int mg, bool split) {
  static constexpr ComputeBlockFn kTable[2][2][2] = {
      {{ComputeBlock<1, 1, false>, ComputeBlock<1, 1, true>},
       {ComputeBlock<1, 2, false>, ComputeBlock<1, 2, true>}},
      {{ComputeBlock<2, 1, false>, ComputeBlock<2, 1, true>},
       {ComputeBlock<2, 2, false>, ComputeBlock<2, 2, true>}}};
  return kTable[ng - 1][mg - 1][split ? 1 : 0];
}

// y[i0 + c][n0 + r] (=|+=) C[r][c] (+ bias) for the valid tokens c of one staged C tile.
void WriteTile(const float* c_tile, const MatmulProjection& p, int64_t n0, int64_t i0,
               int64_t num_tokens, bool first) {
  __m512i rows[16];
  for (int r = 0; r < 16; ++r) rows[r] = _mm512_loadu_si512(c_tile + r * 16);
  Transpose16x16(rows);
  const __m512 bias = p.bias != nullptr ? _mm512_loadu_ps(p.bias + n0) : _mm512_setzero_ps();
  for (int64_t c = 0; c < num_tokens; ++c) {
    float* y = p.y + (i0 + c) * p.y_stride + n0;
    const __m512 v = _mm512_castsi512_ps(rows[c]);
    _mm512_storeu_ps(y, first ? _mm512_add_ps(v, bias) : _mm512_add_ps(_mm512_loadu_ps(y), v));
  }
}

// Copies the k tail of `num_groups` × 16 weight rows from row n0 into zero-padded tiles.
void CopyWeightTail(const MatmulProjection& p, int64_t k, int64_t n0, int num_groups,
                    uint8_t* w_tail) {
  const int64_t k_full = k / kTileK * kTileK;
  const auto* w = static_cast<const uint16_t*>(p.weight);
  std::memset(w_tail, 0, static_cast<size_t>(num_groups) * kTileBytes);
  for (int64_t r = 0; r < 16 * num_groups; ++r) {
    std::memcpy(w_tail + r * 64, w + (n0 + r) * k + k_full,
                static_cast<size_t>(k - k_full) * sizeof(uint16_t));
  }
}

struct AmxCall {
  const GroupArgs* args;
  PackedX packed;
  uint8_t* thread_scratch;  // kThreadScratchBytes per thread
  int64_t chunk_blocks;
};

// Tokens [m0, m1) against 32 (ng = 2) or 16 weight rows from row n, k blocks as set in `a`;
// the C tiles go to y (assigned with bias on the first k chunk, added to after).
void RunRowBlock(const AmxCall& call, const MatmulProjection& p, int64_t n, int ng, int64_t m0,
                 int64_t m1, BlockArgs& a) {
  const bool first_chunk = a.block_begin == 0;
  a.w = static_cast<const uint8_t*>(p.weight) + n * a.w_stride;
  for (int64_t i = m0; i < m1; i += 32) {
    const int mg = m1 - i > 16 ? 2 : 1;
    a.x_tiles = call.packed.tile(i / 16, 0);
    PickComputeBlock(ng, mg, call.packed.num_parts == kSplitParts)(a);
    for (int t = 0; t < ng * 2; ++t) {  // tile t = 2 * (weight group) + (token group)
      const int g = t % 2;
      if (g >= mg) continue;
      const int64_t tokens = m1 - (i + 16 * g) < 16 ? m1 - (i + 16 * g) : 16;
      WriteTile(a.c_stage + t * 256, p, n + 16 * (t / 2), i + 16 * g, tokens, first_chunk);
    }
  }
}

// Weight rows [n0, n1) of one bf16 projection, n1 - n0 a multiple of 16, all tokens.
void RunTileRows(const AmxCall& call, const MatmulProjection& p, int64_t n0, int64_t n1,
                 uint8_t* scratch) {
  const MatmulInput& x = call.args->x;
  const PackedX& packed = call.packed;
  BlockArgs a{};
  a.w_stride = x.k * 2;
  a.x_group_stride = packed.group_stride();
  a.num_parts = packed.num_parts;
  a.num_full_blocks = x.k / kTileK;
  a.w_tail = scratch;
  a.c_stage = reinterpret_cast<float*>(scratch + 2 * kTileBytes);
  for (int64_t m0 = 0; m0 < x.m; m0 += kMc) {
    const int64_t m1 = m0 + kMc < x.m ? m0 + kMc : x.m;
    for (int64_t b0 = 0; b0 < packed.num_blocks; b0 += call.chunk_blocks) {
      a.block_begin = b0;
      a.block_end =
          b0 + call.chunk_blocks < packed.num_blocks ? b0 + call.chunk_blocks : packed.num_blocks;
      for (int64_t n = n0; n < n1; n += 32) {
        const int ng = n1 - n >= 32 ? 2 : 1;
        if (a.block_end > a.num_full_blocks) CopyWeightTail(p, x.k, n, ng, scratch);
        RunRowBlock(call, p, n, ng, m0, m1, a);
      }
    }
  }
}

// One thread's rows of one projection: tiles for bf16 rows in whole 16s, the AVX-512 dot kernel
// for the rest (and for a non-bf16 weight, which the dispatcher does not send here).
void RunProjectionRows(const AmxCall& call, const MatmulProjection& p, int64_t row_begin,
                       int64_t row_end, uint8_t* scratch) {
  if (p.dtype != DType::kBF16) {
    GemmRowsAvx512(call.args->x, p, row_begin, row_end);
    return;
  }
  const int64_t tile_end = row_begin + (row_end - row_begin) / 16 * 16;
  if (tile_end > row_begin) RunTileRows(call, p, row_begin, tile_end, scratch);
  if (tile_end < row_end) GemmRowsAvx512(call.args->x, p, tile_end, row_end);
}

uint8_t* AlignTo64(void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<uint8_t*>((address + 63) & ~uintptr_t{63});
}

int64_t PackedBytes(int64_t m, int64_t k, MatmulPrecision precision) {
  const int64_t parts = precision == MatmulPrecision::kHighest ? kSplitParts : 1;
  return (m + 15) / 16 * ((k + kTileK - 1) / kTileK) * parts * kTileBytes;
}

}  // namespace

size_t GemmAmxWorkspaceBytes(int64_t m, int64_t k, int num_threads, MatmulPrecision precision) {
  return static_cast<size_t>(64 + PackedBytes(m, k, precision) +
                             int64_t{num_threads} * kThreadScratchBytes);
}

void GemmAmx(const GroupArgs& args, ThreadPool& pool) {
  const bool split = args.precision == MatmulPrecision::kHighest;
  AmxCall call{};
  call.args = &args;
  call.packed.data = AlignTo64(args.workspace);
  call.packed.num_groups = (args.x.m + 15) / 16;
  call.packed.num_blocks = (args.x.k + kTileK - 1) / kTileK;
  call.packed.num_parts = split ? kSplitParts : 1;
  call.thread_scratch = call.packed.data + PackedBytes(args.x.m, args.x.k, args.precision);
  call.chunk_blocks = split ? kChunkBlocksSplit : kChunkBlocksSingle;

  pool.ParallelFor(call.packed.num_groups, [&](int64_t begin, int64_t end, int /*thread*/) {
    for (int64_t g = begin; g < end; ++g) PackGroup(args.x, g, call.packed);
  });
  constexpr int64_t kUnitRows = 32;
  const int64_t num_units = CountRowUnits(args.projections, kUnitRows);
  pool.ParallelFor(num_units, [&](int64_t begin, int64_t end, int thread) {
    uint8_t* scratch = call.thread_scratch + thread * kThreadScratchBytes;
    LoadTileConfig();
    ForEachRowRange(args.projections, kUnitRows, begin, end,
                    [&](const MatmulProjection& p, int64_t row_begin, int64_t row_end) {
                      RunProjectionRows(call, p, row_begin, row_end, scratch);
                    });
    TileRelease();
  });
}

}  // namespace loom::cpu::matmul_internal
