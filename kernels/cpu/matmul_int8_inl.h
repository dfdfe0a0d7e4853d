// The int8-activation GEMV of block-quantized weights (MatmulOptions::quant_activations =
// QuantActivations::kInt8): x is quantized to signed bytes once per call and every weight block is
// dotted with it in integer arithmetic. Written with 256-bit AVX2 integer intrinsics; included by
// matmul_avx2.cc and matmul_avx512.cc (both levels run these 256-bit kernels).
//
// x quantization (QuantizeX32 / QuantizeX256), per x row, into the workspace:
//   XBlock32  (q8_0, q4_0, q4_1): 32 elements, d = max|x| / 127, q = round_half_even(x * (1 / d))
//             (q = 0 for an all-zero block), and sum = sum of the 32 q.
//   XBlock256 (q4_k, q5_k, q6_k): the same over 256 elements with one d, and bsums[i] = the sum of
//             q over elements 16i .. 16i + 15.
// So x ~= d * q with |x - d * q| <= d / 2 = max|x| / 254 per element of the block.
//
// Weight blocks (layouts in kernels/ref/quant_ref.h), per x row, exact integer sums then one f32
// multiply-add per block (dw, dmin: the block's f16 fields; sc, mn: its sub-block scales/mins):
//   q8_0: dw dx sum(w_q x_q)                  w_q signed: |w_q| times x_q with w_q's sign
//                                             (vpsignb), so vpmaddubsw sees unsigned x signed
//   q4_0: dw dx (sum(w_q x_q) - 8 sum)        w_q the unsigned nibbles
//   q4_1: dw dx sum(w_q x_q) + m dx sum
//   q4_k, q5_k: d dx sum_g sc_g sum(w_q x_q) - dmin dx sum_g mn_g (bsums[2g] + bsums[2g + 1])
//   q6_k: d dx (sum_i sc_i sum(w_q x_q) - 32 sum_i sc_i bsums[i])   w_q the unsigned 6-bit values,
//                                             i over the 16-element sub-blocks
// The byte products go through vpmaddubsw (u8 x s8 -> pairs summed in int16; the largest pair,
// 2 * 63 * 127, cannot saturate) and vpmaddwd (int16 -> int32, with the sub-block scale as the
// second factor for the k-quants). QuantizeXLikeKernel + ExpectInt8Matches in
// tests/kernels/quant_matmul_test.cc state the same arithmetic in scalar code.
//
// The GEMV walks weight rows as matmul_quant_inl.h does (kNr runs of a thread's rows side by side,
// every weight byte read once, all m rows of x dotted with each decoded block).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/dtype.h"
#include "kernels/cpu/matmul_dot_inl.h"
#include "kernels/cpu/matmul_internal.h"

namespace loom::cpu::matmul_internal {
namespace {

struct XBlock32 {
  float d;
  int32_t sum;
  int8_t q[32];
};
struct XBlock256 {
  float d;
  int16_t bsums[16];
  int8_t q[256];
};

inline float Int8LoadHalf(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return _cvtsh_ss(bits);
}

inline __m256i Int8Load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// max |x[i]| over n (a multiple of 8) elements.
inline float AbsMax(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// q[i] = round_half_even(x[i] * inv) for n (a multiple of 32) elements; |x[i] * inv| <= 127.
inline void QuantizeBytes(const float* x, int n, float inv, int8_t* q) {
  const __m256 scale = _mm256_set1_ps(inv);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int i = 0; i < n; i += 32) {
    __m256i v[4];
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), scale));
    }
    // packs interleave the 128-bit lanes: dwords come out as a0 b0 c0 d0 a1 b1 c1 d1 (4 bytes
    // each); the permutation restores a0 a1 b0 b1 ...
    const __m256i ab = _mm256_packs_epi32(v[0], v[1]);
    const __m256i cd = _mm256_packs_epi32(v[2], v[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), bytes);
  }
}

// Scale of a block with largest magnitude amax, and its inverse (0 for an all-zero block).
inline void BlockScale(float amax, float* d, float* inv) {
  *d = amax / 127.0f;
  *inv = *d > 0.0f ? 1.0f / *d : 0.0f;
}

inline void QuantizeX32(const float* x, int64_t k, XBlock32* out) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + 32 * b;
    float inv;
    BlockScale(AbsMax(xb, 32), &out[b].d, &inv);
    QuantizeBytes(xb, 32, inv, out[b].q);
    int32_t sum = 0;
    for (int l = 0; l < 32; ++l) sum += out[b].q[l];
    out[b].sum = sum;
  }
}

inline void QuantizeX256(const float* x, int64_t k, XBlock256* out) {
  for (int64_t b = 0; b < k / 256; ++b) {
    const float* xb = x + 256 * b;
    float inv;
    BlockScale(AbsMax(xb, 256), &out[b].d, &inv);
    QuantizeBytes(xb, 256, inv, out[b].q);
    for (int i = 0; i < 16; ++i) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += out[b].q[16 * i + l];
      out[b].bsums[i] = static_cast<int16_t>(sum);
    }
  }
}

static_assert(sizeof(XBlock32) == kInt8XBlock32Bytes && sizeof(XBlock256) == kInt8XBlock256Bytes);

// Sum of the eight int32 lanes of v as f32 lanes: acc += s * float(v).
inline __m256 ScaleAdd(float s, __m256i v, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_set1_ps(s), _mm256_cvtepi32_ps(v), acc);
}

// u8 . s8 in groups of four bytes, one int32 per group. The AVX-512 build (which requires VNNI)
// takes one vpdpbusd; AVX2 pairs bytes in int16 (vpmaddubsw, which cannot saturate here: see
// above) and then adds the pairs (vpmaddwd by ones). The integer sums are the same.
inline __m256i PairSums(__m256i u8, __m256i s8) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u8, s8);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1));
#endif
}

// Each kernel: kDType, kBlockElems, kBlockBytes, XBlock, and
//   Accumulate<kMr, kNr>(w, x_rows, blk, acc, r): acc[a][r] += block blk of weight row w . block
//   blk of x row a, for a < kMr (partial sums in f32 lanes).
struct Q8_0Int8 {
  static constexpr DType kDType = DType::kQ8_0;
  static constexpr int kBlockElems = 32, kBlockBytes = 34;
  using XBlock = XBlock32;
  static constexpr bool kHasDot = true;
  static constexpr bool kDotMinus8Sum = false, kDotPlusMin = false;
  // The integer dot of one block with one x block, spread over 8 lanes (the f16 scale is at w).
  static __m256i Dot(const uint8_t* w, const XBlock& xb) {
    const __m256i q = Int8Load32(w + 2);
    return PairSums(_mm256_sign_epi8(q, q), _mm256_sign_epi8(Int8Load32(xb.q), q));
  }
  template <int kMr, int kNr>
  static void Accumulate(const uint8_t* w, const XBlock* const* x, int64_t blk,
                         __m256 (&acc)[kMr][kNr], int r) {
    const float dw = Int8LoadHalf(w);
    const __m256i q = Int8Load32(w + 2);
    const __m256i aq = _mm256_sign_epi8(q, q);
#pragma GCC unroll 8
    for (int a = 0; a < kMr; ++a) {
      const XBlock& xb = x[a][blk];
      const __m256i sx = _mm256_sign_epi8(Int8Load32(xb.q), q);
      acc[a][r] = ScaleAdd(dw * xb.d, PairSums(aq, sx), acc[a][r]);
    }
  }
};

// 16 bytes of nibbles -> 32 unsigned bytes: low nibbles (elements 0..15), then high (16..31).
// The 16 bytes go to both halves in one load; the upper half alone is shifted right by 4 (as
// 64-bit lanes: each byte's high nibble lands in its low nibble, the bits shifted in from the
// next byte fall above the mask).
inline __m256i Int8Nibbles16(const uint8_t* p) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0)),
                          _mm256_set1_epi8(0x0f));
}

template <bool kHasMin>
struct Q4Int8 {
  static constexpr DType kDType = kHasMin ? DType::kQ4_1 : DType::kQ4_0;
  static constexpr int kBlockElems = 32, kBlockBytes = kHasMin ? 20 : 18;
  using XBlock = XBlock32;
  static constexpr bool kHasDot = true;
  // Dot leaves out q4_0's -8 sum of (q - 8) . x and q4_1's m dx sum: the caller adds them once
  // for several rows.
  static constexpr bool kDotMinus8Sum = !kHasMin;
  static constexpr bool kDotPlusMin = kHasMin;
  static __m256i Dot(const uint8_t* w, const XBlock& xb) {
    return PairSums(Int8Nibbles16(w + (kHasMin ? 4 : 2)), Int8Load32(xb.q));
  }
  // The same products as 16 int16 pair sums (vpmaddubsw alone): |pair| <= 2 * 15 * 127, so up to
  // 16 products (30480) can be summed in int16 before widening (Int8DotRows4).
  static constexpr bool kHasDot16 = true;
  static __m256i Dot16(const uint8_t* w, const XBlock& xb) {
    return _mm256_maddubs_epi16(Int8Nibbles16(w + (kHasMin ? 4 : 2)), Int8Load32(xb.q));
  }
  // q4_1's m dx sum: Accumulate leaves it out, Int8GemvTile adds m times Int8X::dsum32 for four
  // x rows per FMA. (q4_0's -8 sum stays in the integer dot: subtracting it there measured faster
  // than a float term.)
  static float BiasCoef(const uint8_t* w) { return Int8LoadHalf(w + 2); }
  template <int kMr, int kNr>
  static void Accumulate(const uint8_t* w, const XBlock* const* x, int64_t blk,
                         __m256 (&acc)[kMr][kNr], int r) {
    const float dw = Int8LoadHalf(w);
    const __m256i q = Int8Nibbles16(w + (kHasMin ? 4 : 2));
#pragma GCC unroll 8
    for (int a = 0; a < kMr; ++a) {
      const XBlock& xb = x[a][blk];
      __m256i dot = PairSums(q, Int8Load32(xb.q));
      // (q - 8) . x = q . x - 8 sum: sum subtracted from each of the 8 lanes.
      if constexpr (!kHasMin) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(xb.sum));
      acc[a][r] = ScaleAdd(dw * xb.d, dot, acc[a][r]);
    }
  }
};

// int16 j (< 8) of each 128-bit lane broadcast over that lane.
inline __m256i BroadcastWord(__m256i v, int j) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>((2 * j + 1) << 8 | 2 * j)));
}

// q4_k (kFiveBit = false) and q5_k.
template <bool kFiveBit>
struct K4Int8 {
  static constexpr DType kDType = kFiveBit ? DType::kQ5_K : DType::kQ4_K;
  static constexpr int kBlockElems = 256, kBlockBytes = kFiveBit ? 176 : 144;
  using XBlock = XBlock256;
  template <int kMr, int kNr>
  static void Accumulate(const uint8_t* w, const XBlock* const* x, int64_t blk,
                         __m256 (&acc)[kMr][kNr], int r) {
    const float d = Int8LoadHalf(w), dmin = Int8LoadHalf(w + 2);
    // The 12 scale bytes as three words: scales 0..3 and mins 0..3 are the low 6 bits of words
    // 0 and 1; scales 4..7 and mins 4..7 take their low 4 bits from word 2 (low / high nibbles)
    // and their top 2 bits from the top 2 bits of words 0 / 1.
    uint32_t word[3];
    std::memcpy(word, w + 4, 12);
    constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
    const uint32_t sc_lo = word[0] & k6, mn_lo = word[1] & k6;
    const uint32_t sc_hi = (word[2] & k4) | (((word[0] >> 6) & k2) << 4);
    const uint32_t mn_hi = ((word[2] >> 4) & k4) | (((word[1] >> 6) & k2) << 4);
    const __m128i sc8 = _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), 0, 0);
    const __m128i mn8 = _mm_setr_epi32(static_cast<int>(mn_lo), static_cast<int>(mn_hi), 0, 0);
    const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
    const __m128i mins = _mm_cvtepu8_epi16(mn8);  // one per 32 elements
    // Each min twice, to pair with the 16-element sums of x.
    const __m256i mins2 = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins),
                                           _mm_unpacklo_epi16(mins, mins));
    const uint8_t* qs = w + (kFiveBit ? 48 : 16);
    __m256i isum[kMr];
#pragma GCC unroll 8
    for (int a = 0; a < kMr; ++a) isum[a] = _mm256_setzero_si256();
    const __m256i mask = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i packed = Int8Load32(qs + 32 * c);
      __m256i lo = _mm256_and_si256(packed, mask);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), mask);
      if constexpr (kFiveBit) {
        // Bit g of qh[l] is the 16s of element l of group g.
        const __m256i qh = Int8Load32(w + 16);
        const __m256i b16 = _mm256_set1_epi8(0x10);
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(
                                     _mm256_srli_epi16(qh, 2 * c), 4), b16));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(
                                     _mm256_srli_epi16(qh, 2 * c + 1), 4), b16));
      }
      const __m256i s_lo = BroadcastWord(scales, 2 * c);
      const __m256i s_hi = BroadcastWord(scales, 2 * c + 1);
#pragma GCC unroll 8
      for (int a = 0; a < kMr; ++a) {
        const int8_t* xq = x[a][blk].q + 64 * c;
        const __m256i p_lo = _mm256_maddubs_epi16(lo, Int8Load32(xq));
        const __m256i p_hi = _mm256_maddubs_epi16(hi, Int8Load32(xq + 32));
        isum[a] = _mm256_add_epi32(isum[a], _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo),
                                                             _mm256_madd_epi16(p_hi, s_hi)));
      }
    }
#pragma GCC unroll 8
    for (int a = 0; a < kMr; ++a) {
      const XBlock& xb = x[a][blk];
      const __m256i min_dot = _mm256_madd_epi16(Int8Load32(xb.bsums), mins2);
      acc[a][r] = ScaleAdd(d * xb.d, isum[a], acc[a][r]);
      acc[a][r] = ScaleAdd(-dmin * xb.d, min_dot, acc[a][r]);
    }
  }
};

struct Q6_KInt8 {
  static constexpr DType kDType = DType::kQ6_K;
  static constexpr int kBlockElems = 256, kBlockBytes = 210;
  using XBlock = XBlock256;
  template <int kMr, int kNr>
  static void Accumulate(const uint8_t* w, const XBlock* const* x, int64_t blk,
                         __m256 (&acc)[kMr][kNr], int r) {
    const float d = Int8LoadHalf(w + 208);
    // The 16 signed scales as int16: [sc0 .. sc7 | sc8 .. sc15].
    const __m256i scales =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192)));
    const __m256i sc_first = _mm256_permute2x128_si256(scales, scales, 0x00);
    const __m256i sc_second = _mm256_permute2x128_si256(scales, scales, 0x11);
    __m256i isum[kMr];
#pragma GCC unroll 8
    for (int a = 0; a < kMr; ++a) {
      // The -32 of every weight: -32 sum_i sc_i bsums[i].
      const __m256i corr = _mm256_madd_epi16(Int8Load32(x[a][blk].bsums), scales);
      isum[a] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
    }
    const __m256i mask = _mm256_set1_epi8(0x0f), three = _mm256_set1_epi8(3);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i qh = Int8Load32(w + 128 + 32 * h);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        // Group g = 4h + j: low 4 bits from ql[64h + 32(j & 1) + l] (nibble j >> 1), high 2 bits
        // from qh[32h + l] at bit 2j.
        const int g = 4 * h + j;
        const __m256i packed = Int8Load32(w + 64 * h + 32 * (j & 1));
        const __m256i low = _mm256_and_si256((j >> 1) ? _mm256_srli_epi16(packed, 4) : packed,
                                             mask);
        const __m256i high =
            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), three), 4);
        const __m256i q = _mm256_or_si256(low, high);
        // Elements 0..15 of the group take scale 2g (low lane), 16..31 scale 2g + 1.
        const __m256i src = g < 4 ? sc_first : sc_second;
        const int i0 = 2 * (g % 4);
        const __m256i ctrl = _mm256_set_m128i(
            _mm_set1_epi16(static_cast<int16_t>((2 * i0 + 3) << 8 | (2 * i0 + 2))),
            _mm_set1_epi16(static_cast<int16_t>((2 * i0 + 1) << 8 | (2 * i0))));
        const __m256i sc = _mm256_shuffle_epi8(src, ctrl);
#pragma GCC unroll 8
        for (int a = 0; a < kMr; ++a) {
          const __m256i p = _mm256_maddubs_epi16(q, Int8Load32(x[a][blk].q + 32 * g));
          isum[a] = _mm256_add_epi32(isum[a], _mm256_madd_epi16(p, sc));
        }
      }
    }
#pragma GCC unroll 8
    for (int a = 0; a < kMr; ++a) acc[a][r] = ScaleAdd(d * x[a][blk].d, isum[a], acc[a][r]);
  }
};

// Whether K's dots leave out a per-block min term that the tile adds from Int8X::dsum32 (q4_1).
template <class K, class = void>
inline constexpr bool kUsesBlockBias = false;
template <class K>
inline constexpr bool kUsesBlockBias<K, std::enable_if_t<K::kDotPlusMin>> = true;

template <class K, class = void>
struct HasDot : std::false_type {};
template <class K>
struct HasDot<K, std::enable_if_t<K::kHasDot>> : std::true_type {};

// The f16 at byte `offset` of each of four blocks, as f32.
inline __m128 Int8Halves4(const uint8_t* const* w, int offset) {
  uint16_t h[4];
  for (int r = 0; r < 4; ++r) std::memcpy(&h[r], w[r] + offset, 2);
  return _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(h[0]), static_cast<int16_t>(h[1]),
                                     static_cast<int16_t>(h[2]), static_cast<int16_t>(h[3]), 0, 0,
                                     0, 0));
}

// Whether Int8DotRows4 folds K's rows in int16 (K::Dot16; not where VNNI gives int32 dots in one
// instruction).
template <class K, class = void>
inline constexpr bool kInt16Tree = false;
#if !(defined(__AVX512VNNI__) && defined(__AVX512VL__))
template <class K>
inline constexpr bool kInt16Tree<K, std::enable_if_t<K::kHasDot16>> = true;
#endif

// The (d, m) f16 header pairs of four q4_1 blocks as f32: d of block r in lanes r and r + 4, m
// in lanes 0-3 of *mins (one conversion for both).
inline __m256 Int8HeaderPairs4(const uint8_t* const* w, __m256* mins) {
  int32_t dm[4];
  for (int r = 0; r < 4; ++r) std::memcpy(&dm[r], w[r], 4);
  const __m256 both = _mm256_cvtph_ps(_mm_setr_epi32(dm[0], dm[1], dm[2], dm[3]));
  *mins = _mm256_permutevar8x32_ps(both, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7));
  return _mm256_permutevar8x32_ps(both, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
}

// One x row by four weight rows of a 32-element format (q8_0, q4_0, q4_1): the four rows' integer
// dots of a block are folded into one vector with vphaddd (lane r and r + 4 hold row r), their
// four f16 scales converted by one vcvtph2ps, so the f32 work per block is one conversion and one
// FMA for all four rows (q4_1: the four mins times dx sum go to a second accumulator, added to
// lanes 0-3 at the end). acc lanes r + (r + 4) sum to row r.
template <class K>
__m256 Int8DotRows4(const XBlock32* x, const float* dsum, int64_t dsum_stride,
                    const uint8_t* const* w_rows, int64_t num_blocks) {
  __m256 acc = _mm256_setzero_ps();
  __m256 bias = _mm256_setzero_ps();  // q4_1: m dx sum per row, lanes 0-3 (4-7 unused)
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const uint8_t* w[4];
    for (int r = 0; r < 4; ++r) w[r] = w_rows[r] + blk * K::kBlockBytes;
    const XBlock32& xb = x[blk];
    __m256i dots;
    if constexpr (kInt16Tree<K>) {
      // 4-bit codes: the four rows' pair sums folded in int16 (sums of 4, then 8 products), then
      // widened once; the lanes end as below. Without VNNI this takes 4 + 3 + 1 instructions
      // where the int32 tree takes 8 + 3.
      const __m256i h01 = _mm256_hadd_epi16(K::Dot16(w[0], xb), K::Dot16(w[1], xb));
      const __m256i h23 = _mm256_hadd_epi16(K::Dot16(w[2], xb), K::Dot16(w[3], xb));
      dots = _mm256_madd_epi16(_mm256_hadd_epi16(h01, h23), _mm256_set1_epi16(1));
    } else {
      const __m256i d01 = _mm256_hadd_epi32(K::Dot(w[0], xb), K::Dot(w[1], xb));
      const __m256i d23 = _mm256_hadd_epi32(K::Dot(w[2], xb), K::Dot(w[3], xb));
      dots = _mm256_hadd_epi32(d01, d23);
    }
    // Each lane now sums four of a row's eight: a quarter of the row's -8 sum.
    if constexpr (K::kDotMinus8Sum) dots = _mm256_sub_epi32(dots, _mm256_set1_epi32(4 * xb.sum));
    if constexpr (K::kDotPlusMin) {
      __m256 mins;
      const __m256 d = Int8HeaderPairs4(w, &mins);
      acc = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(xb.d)), _mm256_cvtepi32_ps(dots), acc);
      bias = _mm256_fmadd_ps(mins, _mm256_broadcast_ss(dsum + blk * dsum_stride), bias);
    } else {
      const __m128 scales = _mm_mul_ps(Int8Halves4(w, 0), _mm_set1_ps(xb.d));
      acc = _mm256_fmadd_ps(_mm256_set_m128(scales, scales), _mm256_cvtepi32_ps(dots), acc);
    }
  }
  if constexpr (K::kDotPlusMin) {
    acc = _mm256_add_ps(acc, _mm256_castps128_ps256(_mm256_castps256_ps128(bias)));
  }
  return acc;
}

inline float Int8ReduceAdd(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}

// Quantized x of one call: row a of each layout (null where k does not admit it), and dx sum of
// every 32-element block as f32, block-major: dsum32[blk * m4 + a], m4 = m rounded up to 4 (the
// rows past m are 0), so one 128-bit load gives four rows' values for a block.
struct Int8X {
  const XBlock32* x32 = nullptr;
  const XBlock256* x256 = nullptr;
  const float* dsum32 = nullptr;
  int64_t row_blocks32 = 0;
  int64_t row_blocks256 = 0;
  int64_t m4 = 0;
  template <class XB>
  const XB* Row(int64_t a) const {
    if constexpr (sizeof(XB) == sizeof(XBlock32)) return x32 + a * row_blocks32;
    else return x256 + a * row_blocks256;
  }
};

// Whether `dtype` has an int8 kernel here (all six block formats do).
inline bool HasInt8Kernel(DType dtype) { return IsQuantizedDType(dtype); }

template <typename Fn>
void WithInt8Kernel(DType dtype, const Fn& fn) {
  switch (dtype) {
    case DType::kQ8_0:
      return fn(Q8_0Int8{});
    case DType::kQ4_0:
      return fn(Q4Int8<false>{});
    case DType::kQ4_1:
      return fn(Q4Int8<true>{});
    case DType::kQ4_K:
      return fn(K4Int8<false>{});
    case DType::kQ5_K:
      return fn(K4Int8<true>{});
    default:
      return fn(Q6_KInt8{});
  }
}

// Quantizes every row of x into the workspace, in the layouts the group's weights need.
inline Int8X QuantizeXForGroup(const GroupArgs& args) {
  const MatmulInput& x = args.x;
  uintptr_t base = reinterpret_cast<uintptr_t>(args.workspace);
  base = (base + 63) & ~uintptr_t{63};
  bool need32 = false, need256 = false, need_dsum = false;
  for (const MatmulProjection& p : args.projections) {
    if (!HasInt8Kernel(p.dtype) || p.n == 0) continue;
    (TraitsOf(p.dtype).block_elems == 32 ? need32 : need256) = true;
    need_dsum = need_dsum || p.dtype == DType::kQ4_1;
  }
  Int8X out;
  out.row_blocks32 = x.k / 32;
  out.row_blocks256 = x.k / 256;
  auto* x32 = reinterpret_cast<XBlock32*>(base);
  auto* x256 = reinterpret_cast<XBlock256*>(base + x.m * out.row_blocks32 * sizeof(XBlock32));
  // After the 256-element blocks where k admits them (Int8XWorkspaceBytes).
  const int64_t blocks256 = x.k % 256 == 0 ? out.row_blocks256 : 0;
  auto* dsum32 = reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(x256) +
                                          x.m * blocks256 * sizeof(XBlock256));
  out.m4 = (x.m + 3) / 4 * 4;
  for (int64_t a = 0; a < x.m; ++a) {
    const float* row = x.data + a * x.stride;
    if (need32) QuantizeX32(row, x.k, x32 + a * out.row_blocks32);
    if (need256) QuantizeX256(row, x.k, x256 + a * out.row_blocks256);
  }
  if (need_dsum) {
    for (int64_t blk = 0; blk < out.row_blocks32; ++blk) {
      float* to = dsum32 + blk * out.m4;
      for (int64_t a = 0; a < out.m4; ++a) {
        const XBlock32* xb = x32 + a * out.row_blocks32 + blk;
        to[a] = a < x.m ? xb->d * static_cast<float>(xb->sum) : 0.0f;
      }
    }
  }
  out.x32 = x32;
  out.x256 = x256;
  out.dsum32 = dsum32;
  return out;
}

// One tile: x rows [i, i + kMr) by the weight rows first, first + step, ... (< end; rows past it
// repeat `first` and are not stored), all of k.
template <class K, int kMr, int kNr>
void Int8GemvTile(const Int8X& xq, const MatmulInput& x, const MatmulProjection& p, int64_t i,
                  int64_t first, int64_t step, int64_t end) {
  using XB = typename K::XBlock;
  const int64_t row_bytes = DTypeRowBytes(K::kDType, x.k);
  const int64_t num_blocks = x.k / K::kBlockElems;
  const auto* wt = static_cast<const uint8_t*>(p.weight);
  const XB* x_rows[kMr];
  const uint8_t* w_rows[kNr];
#pragma GCC unroll 8
  for (int a = 0; a < kMr; ++a) x_rows[a] = xq.Row<XB>(i + a);
#pragma GCC unroll 8
  for (int r = 0; r < kNr; ++r) {
    const int64_t n = first + r * step < end ? first + r * step : first;
    w_rows[r] = wt + n * row_bytes;
  }
  if constexpr (kMr == 1 && kNr == 4 && HasDot<K>::value) {
    const __m256 acc = Int8DotRows4<K>(x_rows[0], xq.dsum32 + i, xq.m4, w_rows, num_blocks);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    float* y = p.y + i * p.y_stride;
    for (int r = 0; r < kNr && first + r * step < end; ++r) {
      const int64_t n = first + r * step;
      const float v = lanes[r] + lanes[r + 4];
      y[n] = p.bias != nullptr ? v + p.bias[n] : v;
    }
    return;
  }
  __m256 acc[kMr][kNr];
#pragma GCC unroll 8
  for (int a = 0; a < kMr; ++a) {
#pragma GCC unroll 8
    for (int r = 0; r < kNr; ++r) acc[a][r] = _mm256_setzero_ps();
  }
  // q4_1's per-block min term: m(block) * dx sum for four x rows per FMA, lane a for x row i + a.
  __m128 block_bias[kNr];
#pragma GCC unroll 8
  for (int r = 0; r < kNr; ++r) block_bias[r] = _mm_setzero_ps();
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
#pragma GCC unroll 8
    for (int r = 0; r < kNr; ++r) {
      const uint8_t* w = w_rows[r] + blk * K::kBlockBytes;
      K::template Accumulate<kMr, kNr>(w, x_rows, blk, acc, r);
      if constexpr (kUsesBlockBias<K>) {
        block_bias[r] = _mm_fmadd_ps(_mm_set1_ps(K::BiasCoef(w)),
                                     _mm_loadu_ps(xq.dsum32 + blk * xq.m4 + i), block_bias[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < kMr; ++a) {
    float* y = p.y + (i + a) * p.y_stride;
    for (int r = 0; r < kNr && first + r * step < end; ++r) {
      const int64_t n = first + r * step;
      float v = Int8ReduceAdd(acc[a][r]);
      if constexpr (kUsesBlockBias<K>) {
        alignas(16) float lanes[4];
        _mm_store_ps(lanes, block_bias[r]);
        v += lanes[a];
      }
      y[n] = p.bias != nullptr ? v + p.bias[n] : v;
    }
  }
}

template <class K, int kMrMax, int kNr>
void Int8GemvTileRows(int mr, const Int8X& xq, const MatmulInput& x, const MatmulProjection& p,
                      int64_t i, int64_t first, int64_t step, int64_t end) {
  if (mr == kMrMax) {
    Int8GemvTile<K, kMrMax, kNr>(xq, x, p, i, first, step, end);
  } else if constexpr (kMrMax > 1) {
    Int8GemvTileRows<K, kMrMax - 1, kNr>(mr, xq, x, p, i, first, step, end);
  }
}

template <class K, int kMrMax, int kNr>
void Int8GemvRowsOf(const Int8X& xq, const MatmulInput& x, const MatmulProjection& p,
                    int64_t row_begin, int64_t row_end) {
  const int64_t step = (row_end - row_begin + kNr - 1) / kNr;
  for (int64_t j = 0; j < step; ++j) {
    for (int64_t i = 0; i < x.m; i += kMrMax) {
      const int mr = static_cast<int>(x.m - i < kMrMax ? x.m - i : kMrMax);
      Int8GemvTileRows<K, kMrMax, kNr>(mr, xq, x, p, i, row_begin + j, step, row_end);
    }
  }
}

// The int8 GEMV over weight rows [row_begin, row_end) of one quantized projection.
inline void Int8GemvRows(const Int8X& xq, const MatmulInput& x, const MatmulProjection& p,
                         int64_t row_begin, int64_t row_end) {
  WithInt8Kernel(p.dtype, [&]<class K>(K) {
    if (x.m == 1) {
      Int8GemvRowsOf<K, 1, 4>(xq, x, p, row_begin, row_end);
    } else if (x.m == 2) {
      Int8GemvRowsOf<K, 2, 4>(xq, x, p, row_begin, row_end);
    } else {
      Int8GemvRowsOf<K, 4, 2>(xq, x, p, row_begin, row_end);
    }
  });
}

// The GEMV of a whole group with x quantized first (on the calling thread, into the workspace):
// the quantized projections run the int8 kernels, the float ones the f32 GEMV (matmul_dot_inl.h).
template <class T, int kMrMax, int kNr, int kPrefetchBytes>
void RunInt8GemvGroup(const GroupArgs& args, ThreadPool& pool) {
  const Int8X xq = QuantizeXForGroup(args);
  const int64_t num_units = CountRowUnits(args.projections, kNr);
  ParallelForStealing(pool, num_units, GemvStealPieces(args, pool.num_threads()),
                      [&](int64_t unit_begin, int64_t unit_end) {
    ForEachRowRange(args.projections, kNr, unit_begin, unit_end,
                    [&](const MatmulProjection& p, int64_t row_begin, int64_t row_end) {
                      if (HasInt8Kernel(p.dtype)) {
                        Int8GemvRows(xq, args.x, p, row_begin, row_end);
                      } else {
                        GemvProjectionRows<T, kMrMax, kNr, kPrefetchBytes>(args.x, p, row_begin,
                                                                           row_end);
                      }
                    });
  });
}

// Whether a group takes the int8 GEMV: x quantization asked for and a weight that has a kernel.
inline bool UseInt8Gemv(const GroupArgs& args) {
  if (args.quant_activations != QuantActivations::kInt8) return false;
  for (const MatmulProjection& p : args.projections) {
    if (HasInt8Kernel(p.dtype)) return true;
  }
  return false;
}

}  // namespace
}  // namespace loom::cpu::matmul_internal
