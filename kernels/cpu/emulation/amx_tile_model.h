// Scalar model of the AMX tile unit (palette 1, AMX-TILE + AMX-BF16) for the ISA-emulation build.
// Included only through kernels/cpu/amx_tiles.h when LOOM_ISA_EMULATION is defined; the functions
// here are what amx::TileLoadConfig, TileLoad, TileDpBf16, ... call in that build.
//
// State: each thread has eight tiles of up to 16 rows × 64 bytes and a configuration (rows and
// bytes per row of each tile), like the tile registers of a hardware thread. Outside a tile's
// configured rows and bytes its contents are always zero, as on hardware.
//
// Semantics, from the Intel SDM pseudocode of each instruction:
//   ldtilecfg   palette 1 sets every tile's shape and zeroes the tiles; palette 0 releases them
//   tilerelease back to the initial, unconfigured state
//   tilezero    the whole tile to zero
//   tileloadd   row r = colsb bytes at base + r * stride, for r < rows; the rest zero
//   tilestored  row r to base + r * stride, colsb bytes, for r < rows
//   tdpbf16ps   C[m][n] += A[m][2k] · B[k][2n] + A[m][2k+1] · B[k][2n+1] over k < A.colsb / 4,
//               in that order, each step an f32 FMA with denormal inputs read as zero and denormal
//               results flushed to zero (DAZ, FTZ, round to nearest even), whatever MXCSR says
// Hardware may order (and round) the products inside one TDPBF16PS differently; the tests'
// tolerances cover that.
//
// Checks: the model aborts with a message naming the instruction on what the hardware faults on
// (#GP/#UD) and loom never does on purpose: palette other than 0 or 1; reserved bytes, start_row
// or the entries of tiles 8..15 not zero; rows > 16 or colsb > 64; a tile with only one of rows
// and colsb zero; any tile instruction before ldtilecfg, after tilerelease, or on a tile the
// configuration leaves empty; TDPBF16PS operands whose shapes do not chain (C.rows == A.rows,
// A.colsb / 4 == B.rows, C.colsb == B.colsb, all colsb multiples of 4). Every check is a kernel
// bug, never a data error, so aborting is right (kernels have no other error channel here).
// Reads and writes of memory are plain memcpy of exactly the bytes the instruction touches, so
// AddressSanitizer (cpu-debug preset) reports a tile load or store outside its buffer.
#pragma once

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace loom::cpu::isa_emulation {

constexpr int kModelTiles = 8;
constexpr int kMaxTileRows = 16;
constexpr int kMaxTileColsb = 64;

struct TileUnitState {
  bool configured = false;
  uint8_t rows[kModelTiles] = {};
  uint16_t colsb[kModelTiles] = {};
  alignas(64) uint8_t data[kModelTiles][kMaxTileRows][kMaxTileColsb] = {};
};

// The calling thread's tile registers.
inline TileUnitState& ThisThreadTiles() {
  static thread_local TileUnitState state;
  return state;
}

[[noreturn]] __attribute__((format(printf, 2, 3))) inline void TileFault(const char* instruction,
                                                                        const char* format, ...) {
  std::fprintf(stderr, "loom AMX emulation: %s: ", instruction);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fprintf(stderr, "\n");
  std::abort();
}

inline void ReleaseTiles() {
  TileUnitState& s = ThisThreadTiles();
  s.configured = false;
  std::memset(s.rows, 0, sizeof(s.rows));
  std::memset(s.colsb, 0, sizeof(s.colsb));
  std::memset(s.data, 0, sizeof(s.data));
}

// `config` is the 64-byte memory operand of ldtilecfg.
inline void LoadTileConfig(const void* config) {
  const auto* bytes = static_cast<const uint8_t*>(config);
  const int palette = bytes[0];
  if (palette == 0) return ReleaseTiles();
  if (palette != 1) TileFault("ldtilecfg", "palette %d (only 0 and 1 exist)", palette);
  if (bytes[1] != 0) TileFault("ldtilecfg", "start_row %d (loom never restarts a load)", bytes[1]);
  for (int i = 2; i < 16; ++i) {
    if (bytes[i] != 0) TileFault("ldtilecfg", "reserved byte %d is %d", i, bytes[i]);
  }
  TileUnitState& s = ThisThreadTiles();
  for (int t = 0; t < 16; ++t) {
    uint16_t colsb;
    std::memcpy(&colsb, bytes + 16 + 2 * t, sizeof(colsb));
    const int rows = bytes[48 + t];
    if (t >= kModelTiles) {
      if (colsb != 0 || rows != 0) {
        TileFault("ldtilecfg", "tile %d does not exist (rows %d, colsb %d)", t, rows, colsb);
      }
      continue;
    }
    if (rows > kMaxTileRows) TileFault("ldtilecfg", "tmm%d: %d rows (at most 16)", t, rows);
    if (colsb > kMaxTileColsb) TileFault("ldtilecfg", "tmm%d: colsb %d (at most 64)", t, colsb);
    if ((rows == 0) != (colsb == 0)) {
      TileFault("ldtilecfg", "tmm%d: rows %d with colsb %d", t, rows, colsb);
    }
    s.rows[t] = static_cast<uint8_t>(rows);
    s.colsb[t] = colsb;
  }
  std::memset(s.data, 0, sizeof(s.data));
  s.configured = true;
}

// The state after checking that `tile` may be used by `instruction`.
inline TileUnitState& UsableTile(const char* instruction, int tile) {
  TileUnitState& s = ThisThreadTiles();
  if (!s.configured) {
    TileFault(instruction, "tmm%d used with no tile configuration (no ldtilecfg, or after "
              "tilerelease)", tile);
  }
  if (s.rows[tile] == 0) TileFault(instruction, "tmm%d is not configured (0 rows)", tile);
  return s;
}

inline void TileZero(int tile) {
  TileUnitState& s = UsableTile("tilezero", tile);
  std::memset(s.data[tile], 0, sizeof(s.data[tile]));
}

inline void TileLoad(int tile, const void* base, int64_t stride) {
  TileUnitState& s = UsableTile("tileloadd", tile);
  std::memset(s.data[tile], 0, sizeof(s.data[tile]));
  for (int r = 0; r < s.rows[tile]; ++r) {
    std::memcpy(s.data[tile][r], static_cast<const char*>(base) + r * stride, s.colsb[tile]);
  }
}

inline void TileStore(int tile, void* base, int64_t stride) {
  TileUnitState& s = UsableTile("tilestored", tile);
  for (int r = 0; r < s.rows[tile]; ++r) {
    std::memcpy(static_cast<char*>(base) + r * stride, s.data[tile][r], s.colsb[tile]);
  }
}

// Denormals to (signed) zero: DAZ for inputs, FTZ for results.
inline float FlushDenormal(float x) {
  return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x;
}

// bf16 element `i` of a tile row, as f32 with DAZ.
inline float Bf16Element(const uint8_t* row, int i) {
  uint16_t half;
  std::memcpy(&half, row + 2 * i, sizeof(half));
  const uint32_t bits = static_cast<uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return FlushDenormal(value);
}

inline void TileDpBf16(int c, int a, int b) {
  constexpr const char* kInstruction = "tdpbf16ps";
  UsableTile(kInstruction, c);
  UsableTile(kInstruction, a);
  TileUnitState& s = UsableTile(kInstruction, b);
  for (int t : {c, a, b}) {
    if (s.colsb[t] % 4 != 0) {
      TileFault(kInstruction, "tmm%d: colsb %d is not a whole number of dwords", t, s.colsb[t]);
    }
  }
  if (s.rows[c] != s.rows[a]) {
    TileFault(kInstruction, "C tmm%d has %d rows, A tmm%d %d", c, s.rows[c], a, s.rows[a]);
  }
  if (s.colsb[a] / 4 != s.rows[b]) {
    TileFault(kInstruction, "A tmm%d has %d bf16 pairs per row, B tmm%d %d rows", a,
              s.colsb[a] / 4, b, s.rows[b]);
  }
  if (s.colsb[c] != s.colsb[b]) {
    TileFault(kInstruction, "C tmm%d has colsb %d, B tmm%d %d", c, s.colsb[c], b, s.colsb[b]);
  }
  const int num_rows = s.rows[c];
  const int num_cols = s.colsb[c] / 4;
  const int num_pairs = s.colsb[a] / 4;
  for (int m = 0; m < num_rows; ++m) {
    float acc[kMaxTileColsb / 4];
    std::memcpy(acc, s.data[c][m], sizeof(acc));
    for (int n = 0; n < num_cols; ++n) acc[n] = FlushDenormal(acc[n]);
    for (int k = 0; k < num_pairs; ++k) {
      const float a0 = Bf16Element(s.data[a][m], 2 * k);
      const float a1 = Bf16Element(s.data[a][m], 2 * k + 1);
      for (int n = 0; n < num_cols; ++n) {
        acc[n] = FlushDenormal(std::fma(a0, Bf16Element(s.data[b][k], 2 * n), acc[n]));
        acc[n] = FlushDenormal(std::fma(a1, Bf16Element(s.data[b][k], 2 * n + 1), acc[n]));
      }
    }
    std::memcpy(s.data[c][m], acc, static_cast<size_t>(num_cols) * sizeof(float));
  }
}

}  // namespace loom::cpu::isa_emulation
