// The matmul of block-quantized weights (q8_0, q4_0, q4_1, q4_k, q5_k, q6_k; layouts in
// kernels/ref/quant_ref.h), written once over a vector type and instantiated by matmul_avx2.cc and
// matmul_avx512.cc. Include only from files compiled with AVX2 flags (the block decoding below
// uses 256-bit integer intrinsics on both levels).
//
// Math: every format codes each group of 32 consecutive elements of a row as
//   w[l] = scale(l) * (q[l] + kOffset) + bias        q[l] a small integer, l < 32
// with one scale per 16 elements (q6_k) or per 32 (the others) and a bias per 32 elements that is
// zero except for q4_1 (m) and q4_k / q5_k (-dmin * min); kOffset is -8 for q4_0, else 0. A
// group decodes to 32 signed bytes q
// (Format::Group), which the vector traits widen to f32 lanes (T::DecodeGroup: T::WidenBytes of
// Group, or a direct decode from memory where the level has a faster one); the scales of a
// whole block are unpacked once per block and weight row (Format::LoadScales), outside the loops
// over lanes. Activations stay f32 here; the opt-in int8-activation GEMV is matmul_int8_inl.h.
//
// GEMV (QuantGemvRows, small m): the same row order as matmul_dot_inl.h (a thread's rows cut into
// kNr equal runs walked side by side, kNr long sequential streams). Per group and weight row the
// 32 weights are decoded and dequantized in registers (DequantizeGroup: widen, scale, add the
// bias), then every one of the tile's kMr x rows takes 32 / kLanes FMAs, as for an f32 weight.
// The dequantized values are those of ref::DequantizeRow, so only the summation order differs
// from the reference. The weight bytes are read from memory once; x stays in L1/L2. With one x
// row, where the level says so (T::kQuantFactoredM1, AVX2), QuantDotRowFactored multiplies x by
// the codes q and applies each group's scale and bias to the sums instead: the same value up to
// f32 rounding, with fewer instructions per weight.
//
// GEMM (QuantWidenRows, large m): the panel kernel of matmul_panel_inl.h, whose per-thread weight
// block is filled here by the same DequantizeGroup, kc a whole number of blocks.
//
// Unnamed namespace on purpose (as matmul_dot_inl.h): every instruction-set file gets its own
// instantiations.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/dtype.h"
#include "kernels/cpu/matmul_internal.h"

namespace loom::cpu::matmul_internal {
namespace {

inline float LoadHalf(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return _cvtsh_ss(bits);
}

inline __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The scales of one block: group g (32 elements) has scale[2g] for its first 16 elements,
// scale[2g + 1] for the last 16 and bias[g].
template <int kGroups>
struct BlockScales {
  float scale[2 * kGroups];
  float bias[kGroups];
};

// Each format: kDType, block size, groups per block, whether groups carry a bias (kHasBias) or
// two scales (kSplitScale), the integer kOffset; LoadScales(block, scales); Group(block, g) = the
// 32 integers q of group g as signed bytes. Element l of group g is
//   w = scale * (q[l] + kOffset) + bias
// (kOffset: q4_0 stores unsigned nibbles, w = d * (q - 8)).
struct Q8_0Format {
  static constexpr DType kDType = DType::kQ8_0;
  static constexpr int kBlockElems = 32, kBlockBytes = 34, kGroups = 1;
  static constexpr bool kHasBias = false, kSplitScale = false;
  static constexpr int kOffset = 0;
  static void LoadScales(const uint8_t* b, BlockScales<kGroups>* s) {
    s->scale[0] = s->scale[1] = LoadHalf(b);
    s->bias[0] = 0.0f;
  }
  static __m256i Group(const uint8_t* b, int /*g*/) { return Load32(b + 2); }
};

// 16 bytes of nibbles -> 32 bytes: the low nibbles (elements 0..15), then the high (16..31).
inline __m256i SplitNibbles16(const uint8_t* p) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(packed, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
  return _mm256_set_m128i(hi, lo);
}

struct Q4_0Format {
  static constexpr DType kDType = DType::kQ4_0;
  static constexpr int kBlockElems = 32, kBlockBytes = 18, kGroups = 1;
  static constexpr bool kHasBias = false, kSplitScale = false;
  static constexpr int kOffset = -8;
  static void LoadScales(const uint8_t* b, BlockScales<kGroups>* s) {
    s->scale[0] = s->scale[1] = LoadHalf(b);
    s->bias[0] = 0.0f;
  }
  static __m256i Group(const uint8_t* b, int /*g*/) { return SplitNibbles16(b + 2); }
};

struct Q4_1Format {
  static constexpr DType kDType = DType::kQ4_1;
  static constexpr int kBlockElems = 32, kBlockBytes = 20, kGroups = 1;
  static constexpr bool kHasBias = true, kSplitScale = false;
  static constexpr int kOffset = 0;
  static void LoadScales(const uint8_t* b, BlockScales<kGroups>* s) {
    s->scale[0] = s->scale[1] = LoadHalf(b);
    s->bias[0] = LoadHalf(b + 2);
  }
  static __m256i Group(const uint8_t* b, int /*g*/) { return SplitNibbles16(b + 4); }
};

// scale[2j] = scale[2j + 1] = v[j] for the 8 lanes of v.
inline void StorePairs(__m256 v, float* scale) {
  const __m256 lo = _mm256_unpacklo_ps(v, v);  // v0 v0 v1 v1 | v4 v4 v5 v5
  const __m256 hi = _mm256_unpackhi_ps(v, v);  // v2 v2 v3 v3 | v6 v6 v7 v7
  _mm256_storeu_ps(scale, _mm256_permute2f128_ps(lo, hi, 0x20));
  _mm256_storeu_ps(scale + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

// q4_k / q5_k: the eight 6-bit scales and mins of the 12 packed bytes (ref::ScaleMinK4), all at
// once in vector registers; the products d * sc and dmin * mn are those of the reference.
inline void LoadScalesK4(const uint8_t* b, BlockScales<8>* s) {
  const __m256 d = _mm256_set1_ps(LoadHalf(b));
  const __m256 dmin = _mm256_set1_ps(LoadHalf(b + 2));
  // Bytes 4..15 of the block; the 16-byte load also reads the first 4 bytes after them (qs in
  // every K format), which no lane below keeps.
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
  const __m128i m15 = _mm_set1_epi8(15);
  // Bytes 0-3: sc0..3 = q[0..3] & 63; bytes 4-7: mn0..3 = q[4..7] & 63.
  const __m128i first = _mm_and_si128(q, _mm_set1_epi8(63));
  // Bytes 0-3: q[8..11] & 15 (the low 4 bits of sc4..7); bytes 4-7: q[8..11] >> 4 (of mn4..7).
  const __m128i q8 = _mm_srli_si128(q, 8);
  const __m128i nibbles = _mm_unpacklo_epi32(_mm_and_si128(q8, m15),
                                             _mm_and_si128(_mm_srli_epi16(q8, 4), m15));
  // Bytes 0-7: the top 2 bits of q[0..7] as the 16s and 32s of sc4..7 and mn4..7.
  const __m128i top = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(q, 6), _mm_set1_epi8(3)), 4);
  const __m128i second = _mm_or_si128(nibbles, top);
  // Bytes 0-7: sc0..7; bytes 8-15: mn0..7.
  const __m128i both = _mm_unpacklo_epi32(first, second);
  const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(both));
  const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(both, 8)));
  StorePairs(_mm256_mul_ps(d, sc), s->scale);
  // -(dmin * mn): the sign flipped after the product, as the reference computes it.
  _mm256_storeu_ps(s->bias, _mm256_xor_ps(_mm256_mul_ps(dmin, mn), _mm256_set1_ps(-0.0f)));
}

// Nibbles of 32 bytes: the low ones (high = false) or the high ones.
inline __m256i Nibbles32(const uint8_t* p, bool high) {
  const __m256i packed = Load32(p);
  const __m256i mask = _mm256_set1_epi8(0x0f);
  return _mm256_and_si256(high ? _mm256_srli_epi16(packed, 4) : packed, mask);
}

struct Q4_KFormat {
  static constexpr DType kDType = DType::kQ4_K;
  static constexpr int kBlockElems = 256, kBlockBytes = 144, kGroups = 8;
  static constexpr bool kHasBias = true, kSplitScale = false;
  static constexpr int kOffset = 0;
  static void LoadScales(const uint8_t* b, BlockScales<kGroups>* s) { LoadScalesK4(b, s); }
  static __m256i Group(const uint8_t* b, int g) {
    return Nibbles32(b + 16 + 32 * (g / 2), (g & 1) != 0);
  }
};

struct Q5_KFormat {
  static constexpr DType kDType = DType::kQ5_K;
  static constexpr int kBlockElems = 256, kBlockBytes = 176, kGroups = 8;
  static constexpr bool kHasBias = true, kSplitScale = false;
  static constexpr int kOffset = 0;
  static void LoadScales(const uint8_t* b, BlockScales<kGroups>* s) { LoadScalesK4(b, s); }
  static __m256i Group(const uint8_t* b, int g) {
    const __m256i low = Nibbles32(b + 48 + 32 * (g / 2), (g & 1) != 0);
    // Bit g of qh[l] is the 16s of element l: 0x10 where set.
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << g));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(Load32(b + 16), bit), bit);
    return _mm256_or_si256(low, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
  }
};

struct Q6_KFormat {
  static constexpr DType kDType = DType::kQ6_K;
  static constexpr int kBlockElems = 256, kBlockBytes = 210, kGroups = 8;
  static constexpr bool kHasBias = false, kSplitScale = true;
  static constexpr int kOffset = 0;
  static void LoadScales(const uint8_t* b, BlockScales<kGroups>* s) {
    const __m256 d = _mm256_set1_ps(LoadHalf(b + 208));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    _mm256_storeu_ps(s->scale, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(s->scale + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                         _mm_srli_si128(sc, 8)))));
    _mm256_storeu_ps(s->bias, _mm256_setzero_ps());
  }
  // Group g = 4h + j of half h: low 4 bits from ql[64h + 32(j & 1) + l] (nibble j >> 1), high 2
  // bits from qh[32h + l] at bit 2j, minus 32.
  static __m256i Group(const uint8_t* b, int g) {
    const int h = g / 4, j = g % 4;
    const __m256i low = Nibbles32(b + 64 * h + 32 * (j & 1), (j >> 1) != 0);
    const __m256i qh = _mm256_srl_epi16(Load32(b + 128 + 32 * h), _mm_cvtsi32_si128(2 * j));
    const __m256i high = _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4);
    return _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
  }
};

// The weight type tag of a quantized format in the panel GEMM (matmul_panel_inl.h).
template <class F>
struct QuantWeight {
  using Storage = uint8_t;
  using Format = F;
};

template <class W>
constexpr bool kIsQuantWeight = !std::is_same_v<typename W::Storage, float> &&
                                !std::is_same_v<typename W::Storage, uint16_t>;

// Calls fn(F{}) with the format of a quantized `dtype` (which must be one).
template <typename Fn>
void WithQuantFormat(DType dtype, const Fn& fn) {
  switch (dtype) {
    case DType::kQ8_0:
      return fn(Q8_0Format{});
    case DType::kQ4_0:
      return fn(Q4_0Format{});
    case DType::kQ4_1:
      return fn(Q4_1Format{});
    case DType::kQ4_K:
      return fn(Q4_KFormat{});
    case DType::kQ5_K:
      return fn(Q5_KFormat{});
    default:
      return fn(Q6_KFormat{});
  }
}

// The weights of group g as f32 vectors: w = scale * (q + kOffset) + bias, computed as
// ref::DequantizeRow does (q + kOffset is exact; then a multiply and an add).
template <class T, class F>
inline void DequantizeGroup(const uint8_t* block, const BlockScales<F::kGroups>& scales, int g,
                            typename T::V (&w)[32 / T::kLanes]) {
  using V = typename T::V;
  constexpr int kVecs = 32 / T::kLanes;
  constexpr int kHalf = kVecs / 2;  // the first kHalf vectors take scale[2g], the rest [2g + 1]
  T::template DecodeGroup<F>(block, g, w);
  const V scale_lo = T::Set1(scales.scale[2 * g]);
  const V scale_hi = F::kSplitScale ? T::Set1(scales.scale[2 * g + 1]) : scale_lo;
#pragma GCC unroll 4
  for (int v = 0; v < kVecs; ++v) {
    if constexpr (F::kOffset != 0) w[v] = T::Add(w[v], T::Set1(float{F::kOffset}));
    w[v] = T::Mul(w[v], v < kHalf ? scale_lo : scale_hi);
    if constexpr (F::kHasBias) w[v] = T::Add(w[v], T::Set1(scales.bias[g]));
  }
}

// Block `blk` of each of the kNr weight rows, and its scales where kScales.
template <class F, int kNr, bool kScales>
inline void BlockOfRows(const uint8_t* const* w_rows, int64_t blk, const uint8_t* (&block)[kNr],
                        BlockScales<F::kGroups> (&scales)[kNr]) {
#pragma GCC unroll 32
  for (int r = 0; r < kNr; ++r) {
    block[r] = w_rows[r] + blk * F::kBlockBytes;
    if constexpr (kScales) F::LoadScales(block[r], &scales[r]);
  }
}

// out[a * kNr + r] = sum_k x_rows[a][k] * w(w_rows[r])[k] over `num_blocks` blocks. Each group of
// each weight row is dequantized in registers once per tile and then used by all kMr x rows, so
// the per-x-row work is that of an f32 dot product. With one x row, two accumulators per weight
// row keep the FMA latency off the critical path.
template <class T, class F, int kMr, int kNr>
inline void QuantDotTile(const float* const* x_rows, const uint8_t* const* w_rows,
                         int64_t num_blocks, float* out) {
  using V = typename T::V;
  constexpr int kVecs = 32 / T::kLanes;  // vectors per group
  constexpr int kAccs = kMr == 1 && kVecs > 1 ? 2 : 1;
  V acc[kAccs][kMr][kNr];
#pragma GCC unroll 2
  for (int c = 0; c < kAccs; ++c) {
#pragma GCC unroll 32
    for (int a = 0; a < kMr; ++a) {
#pragma GCC unroll 32
      for (int r = 0; r < kNr; ++r) acc[c][a][r] = T::Zero();
    }
  }
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    BlockScales<F::kGroups> scales[kNr];
    const uint8_t* block[kNr];
    BlockOfRows<F, kNr, true>(w_rows, blk, block, scales);
    const int64_t k0 = blk * F::kBlockElems;
#pragma GCC unroll 8
    for (int g = 0; g < F::kGroups; ++g) {
      const int64_t kg = k0 + 32 * g;
#pragma GCC unroll 32
      for (int r = 0; r < kNr; ++r) {
        V w[kVecs];
        DequantizeGroup<T, F>(block[r], scales[r], g, w);
#pragma GCC unroll 32
        for (int a = 0; a < kMr; ++a) {
#pragma GCC unroll 4
          for (int v = 0; v < kVecs; ++v) {
            acc[v % kAccs][a][r] =
                T::Fma(T::LoadX(x_rows[a] + kg + v * T::kLanes), w[v], acc[v % kAccs][a][r]);
          }
        }
      }
    }
  }
#pragma GCC unroll 32
  for (int a = 0; a < kMr; ++a) {
#pragma GCC unroll 32
    for (int r = 0; r < kNr; ++r) {
      V sum = acc[0][a][r];
      if constexpr (kAccs == 2) sum = T::Add(sum, acc[1][a][r]);
      out[a * kNr + r] = T::ReduceAdd(sum);
    }
  }
}

// Factored one-row GEMV (QuantDotRowFactored): formats of one group per block (q8_0, q4_0,
// q4_1) read their f16 header with one conversion on 8-lane vectors: (d, m, 0, 0) for q4_1, (d,
// 0, 0, 0) for the others. Going through BlockScales (a conversion per value, stored and loaded
// back) cost q4_1 a fifth of its speed.
template <class T, class F>
constexpr bool kHeaderPair = F::kGroups == 1 && T::kLanes == 8;

template <class F>
inline __m128 HeaderPs(const uint8_t* block) {
  if constexpr (F::kHasBias) {
    uint32_t bits;
    std::memcpy(&bits, block, sizeof(bits));
    return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
  } else {
    uint16_t bits;
    std::memcpy(&bits, block, sizeof(bits));
    return _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
  }
}

// What QuantDotRowFactored needs of one x row for the constant terms of format F: nothing for
// formats without an offset or bias; for header-pair formats, per group g the pair
// (kOffset * X_g, X_g or 0 without a bias), X_g = x[32g] + ... + x[32g + 31], to meet
// HeaderPs's (d, m); else X_g per group (at most 2 k / 32 floats).
template <class T, class F>
inline void GroupConstants(const float* x, int64_t k, float* out) {
  using V = typename T::V;
  constexpr int kVecs = 32 / T::kLanes;
  if constexpr (F::kOffset != 0 || F::kHasBias) {
    for (int64_t g = 0; g < k / 32; ++g) {
      V s = T::LoadX(x + 32 * g);
#pragma GCC unroll 4
      for (int v = 1; v < kVecs; ++v) s = T::Add(s, T::LoadX(x + 32 * g + v * T::kLanes));
      const float sum = T::ReduceAdd(s);
      if constexpr (kHeaderPair<T, F>) {
        out[2 * g] = float{F::kOffset} * sum;  // exact: a power of two
        out[2 * g + 1] = F::kHasBias ? sum : 0.0f;
      } else {
        out[g] = sum;
      }
    }
  }
}

// One x row (m = 1) by kNr weight rows, with each group's scale taken out of its dot product:
//   sum_l x[l] * (scale * (q[l] + kOffset) + bias)
//     = scale * sum_l x[l] * q[l] + (kOffset * scale + bias) * sum_l x[l]
// (one scale per 16 elements where the format splits them; no format has both a split scale and
// an offset or a bias). Per group and weight row: the decode, one multiply or FMA per vector of
// q, one FMA for the scale, and one FMA for the constant term: (d, m, 0, ...) against the
// group's (kOffset * X, X) pair for q4_0 / q4_1, and for the k-quants one per block, their 8
// biases against the 8 group sums lane by lane (`constants` is GroupConstants of x).
// QuantDotTile instead dequantizes first: a multiply and for a bias an add per vector more. At
// m = 1 nothing shares that work, and the loop is bound by its instructions, not by the weight
// bytes (bench/results/cpu_matmul_quant.md, "Scales out of the m = 1 dot products"). The result
// differs from QuantDotTile's only by f32 rounding.
template <class T, class F, int kNr>
inline void QuantDotRowFactored(const float* x, const float* constants,
                                const uint8_t* const* w_rows, int64_t num_blocks, float* out) {
  using V = typename T::V;
  constexpr int kVecs = 32 / T::kLanes;
  constexpr int kHalf = kVecs / 2;
  constexpr bool kConstant = F::kOffset != 0 || F::kHasBias;
  constexpr bool kPair = kHeaderPair<T, F>;
  static_assert(!F::kSplitScale || !kConstant);
  static_assert(!kConstant || kPair || F::kGroups % T::kLanes == 0);
  V acc[kNr];
#pragma GCC unroll 32
  for (int r = 0; r < kNr; ++r) acc[r] = T::Zero();
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    BlockScales<F::kGroups> scales[kNr];
    const uint8_t* block[kNr];
    BlockOfRows<F, kNr, !kPair>(w_rows, blk, block, scales);
    const int64_t k0 = blk * F::kBlockElems;
    if constexpr (kConstant && !kPair) {
      // The biases of whole vectors of groups against their sums of x, lane by lane.
#pragma GCC unroll 32
      for (int r = 0; r < kNr; ++r) {
#pragma GCC unroll 8
        for (int g = 0; g < F::kGroups; g += T::kLanes) {
          acc[r] =
              T::Fma(T::LoadX(scales[r].bias + g), T::LoadX(constants + k0 / 32 + g), acc[r]);
        }
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < F::kGroups; ++g) {
      const float* xg = x + k0 + 32 * g;
#pragma GCC unroll 32
      for (int r = 0; r < kNr; ++r) {
        V q[kVecs];
        T::template DecodeGroup<F>(block[r], g, q);
        V lo = T::Mul(T::LoadX(xg), q[0]);
#pragma GCC unroll 4
        for (int v = 1; v < kHalf; ++v) lo = T::Fma(T::LoadX(xg + v * T::kLanes), q[v], lo);
        V hi = T::Mul(T::LoadX(xg + kHalf * T::kLanes), q[kHalf]);
#pragma GCC unroll 4
        for (int v = kHalf + 1; v < kVecs; ++v) {
          hi = T::Fma(T::LoadX(xg + v * T::kLanes), q[v], hi);
        }
        if constexpr (kPair) {
          const __m128 header = HeaderPs<F>(block[r]);
          acc[r] = T::Fma(T::Add(lo, hi), _mm256_broadcastss_ps(header), acc[r]);
          if constexpr (kConstant) {
            const __m128 pair = _mm_castpd_ps(
                _mm_load_sd(reinterpret_cast<const double*>(constants + 2 * (k0 / 32 + g))));
            acc[r] = T::Fma(_mm256_zextps128_ps256(header), _mm256_zextps128_ps256(pair), acc[r]);
          }
        } else if constexpr (F::kSplitScale) {
          acc[r] = T::Fma(lo, T::Set1(scales[r].scale[2 * g]), acc[r]);
          acc[r] = T::Fma(hi, T::Set1(scales[r].scale[2 * g + 1]), acc[r]);
        } else {
          acc[r] = T::Fma(T::Add(lo, hi), T::Set1(scales[r].scale[2 * g]), acc[r]);
        }
      }
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < kNr; ++r) out[r] = T::ReduceAdd(acc[r]);
}

// The weight rows of a tile: first, first + step, ... (rows at or past `end` repeat `first`).
template <class F, int kNr>
inline void TileWeightRows(int64_t k, const MatmulProjection& p, int64_t first, int64_t step,
                           int64_t end, const uint8_t* (&w_rows)[kNr]) {
  const int64_t row_bytes = DTypeRowBytes(F::kDType, k);
  const auto* w = static_cast<const uint8_t*>(p.weight);
#pragma GCC unroll 32
  for (int r = 0; r < kNr; ++r) {
    const int64_t n = first + r * step < end ? first + r * step : first;
    w_rows[r] = w + n * row_bytes;
  }
}

// One tile: x rows [i, i + kMr) by the weight rows first, first + step, ... (< end; rows past it
// repeat `first` and are not stored), all of k.
template <class T, class F, int kMr, int kNr>
void QuantGemvTile(const MatmulInput& x, const MatmulProjection& p, int64_t i, int64_t first,
                   int64_t step, int64_t end) {
  const float* x_rows[kMr];
  const uint8_t* w_rows[kNr];
#pragma GCC unroll 32
  for (int a = 0; a < kMr; ++a) x_rows[a] = x.data + (i + a) * x.stride;
  TileWeightRows<F, kNr>(x.k, p, first, step, end, w_rows);
  float out[kMr * kNr];
  QuantDotTile<T, F, kMr, kNr>(x_rows, w_rows, x.k / F::kBlockElems, out);
#pragma GCC unroll 32
  for (int a = 0; a < kMr; ++a) {
    float* y = p.y + (i + a) * p.y_stride;
    for (int r = 0; r < kNr && first + r * step < end; ++r) {
      const int64_t n = first + r * step;
      y[n] = p.bias != nullptr ? out[a * kNr + r] + p.bias[n] : out[a * kNr + r];
    }
  }
}

// The weight rows n = first, first + step, ... (< end) of y[0] for one x row, from
// QuantDotRowFactored.
template <class T, class F, int kNr>
void QuantGemvTileFactored(const MatmulInput& x, const float* constants, const MatmulProjection& p,
                           int64_t first, int64_t step, int64_t end) {
  const uint8_t* w_rows[kNr];
  TileWeightRows<F, kNr>(x.k, p, first, step, end, w_rows);
  float out[kNr];
  QuantDotRowFactored<T, F, kNr>(x.data, constants, w_rows, x.k / F::kBlockElems, out);
  for (int r = 0; r < kNr && first + r * step < end; ++r) {
    const int64_t n = first + r * step;
    p.y[n] = p.bias != nullptr ? out[r] + p.bias[n] : out[r];
  }
}

// QuantGemvTile with the x row count mr <= kMrMax chosen at run time.
template <class T, class F, int kMrMax, int kNr>
void QuantGemvTileRows(int mr, const MatmulInput& x, const MatmulProjection& p, int64_t i,
                       int64_t first, int64_t step, int64_t end) {
  if (mr == kMrMax) {
    QuantGemvTile<T, F, kMrMax, kNr>(x, p, i, first, step, end);
  } else if constexpr (kMrMax > 1) {
    QuantGemvTileRows<T, F, kMrMax - 1, kNr>(mr, x, p, i, first, step, end);
  }
}

// The GEMV over weight rows [row_begin, row_end) of one quantized projection: kNr runs of rows
// side by side, all m rows of x in chunks of kMrMax per tile.
template <class T, class F, int kMrMax, int kNr>
void QuantGemvRowsOf(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin,
                     int64_t row_end) {
  const int64_t step = (row_end - row_begin + kNr - 1) / kNr;
  if constexpr (kMrMax == 1 && T::kQuantFactoredM1) {
    // One x row: the factored dot products, with GroupConstants of x on the stack (k up to
    // 32 * kMaxGroups; a longer row takes the dequantizing tile).
    constexpr int64_t kMaxGroups = 2048;
    if (x.k <= 32 * kMaxGroups) {
      float constants[2 * kMaxGroups];
      GroupConstants<T, F>(x.data, x.k, constants);
      for (int64_t j = 0; j < step; ++j) {
        QuantGemvTileFactored<T, F, kNr>(x, constants, p, row_begin + j, step, row_end);
      }
      return;
    }
  }
  for (int64_t j = 0; j < step; ++j) {
    for (int64_t i = 0; i < x.m; i += kMrMax) {
      const int mr = static_cast<int>(x.m - i < kMrMax ? x.m - i : kMrMax);
      QuantGemvTileRows<T, F, kMrMax, kNr>(mr, x, p, i, row_begin + j, step, row_end);
    }
  }
}

// Entry point of the quantized GEMV for one projection's rows (tile shape by m).
template <class T>
void QuantGemvRows(const MatmulInput& x, const MatmulProjection& p, int64_t row_begin,
                   int64_t row_end) {
  WithQuantFormat(p.dtype, [&]<class F>(F) {
    if (x.m == 1) {
      QuantGemvRowsOf<T, F, 1, T::kQuantRowsM1>(x, p, row_begin, row_end);
    } else if (x.m == 2) {
      QuantGemvRowsOf<T, F, 2, T::kQuantRowsM2>(x, p, row_begin, row_end);
    } else {
      QuantGemvRowsOf<T, F, T::kQuantMrMax, T::kQuantRowsMany>(x, p, row_begin, row_end);
    }
  });
}

// dst[r * ld + kk] = w[n0 + r, k0 + kk] in f32 for r < rows, kk < len (k0 and len whole blocks).
template <class T, class F>
void QuantWidenRows(const MatmulProjection& p, int64_t k, int64_t n0, int64_t rows, int64_t k0,
                    int64_t len, int64_t ld, float* dst) {
  using V = typename T::V;
  constexpr int kVecs = 32 / T::kLanes;
  const int64_t row_bytes = DTypeRowBytes(F::kDType, k);
  const int64_t first_block = k0 / F::kBlockElems;
  const int64_t num_blocks = len / F::kBlockElems;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(p.weight) + (n0 + r) * row_bytes;
    float* out_row = dst + r * ld;
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      const uint8_t* block = row + (first_block + blk) * F::kBlockBytes;
      BlockScales<F::kGroups> scales;
      F::LoadScales(block, &scales);
      float* out = out_row + blk * F::kBlockElems;
#pragma GCC unroll 8
      for (int g = 0; g < F::kGroups; ++g) {
        V w[kVecs];
        DequantizeGroup<T, F>(block, scales, g, w);
#pragma GCC unroll 4
        for (int v = 0; v < kVecs; ++v) T::Store(out + 32 * g + v * T::kLanes, w[v]);
      }
    }
  }
}

}  // namespace
}  // namespace loom::cpu::matmul_internal
