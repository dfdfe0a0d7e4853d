// The AMX tile instructions the tile GEMM (matmul_amx.cc) uses, one inline function each. Include
// only from files ending in _amx.cc: the real instructions need the AMX flags CMake gives them.
//
// Real build: every function is exactly one instruction of inline asm. gcc 12 drops the stores
// that fill a tile configuration before _tile_loadconfig, and its _tile_loadd intrinsic does not
// tell the compiler that it reads memory, so the intrinsics are not used; each asm statement
// states the memory it reads or writes instead ("m" operand or "memory" clobber). Tile registers
// are template arguments, because the instruction encodes the register number: the asm takes it
// as an immediate ("i" operand, printed by %c), and a template keeps it a compile-time constant.
//
// ISA emulation (LOOM_ISA_EMULATION, the loom_kernels_cpu_emulated library that only tests link):
// the same functions call the scalar tile model of kernels/cpu/emulation/amx_tile_model.h, which
// keeps eight tiles per thread, executes each instruction as the Intel SDM's pseudocode
// describes, and aborts with a message on any misuse the hardware would fault on (#GP / #UD):
// a bad configuration, a tile used before ldtilecfg or after tilerelease, or TDPBF16PS operands
// whose shapes do not match. That misuse is a kernel bug, never a data error.
//
// Tile state is per thread (on hardware and in the model): each thread that runs tile
// instructions loads its own configuration first and releases it when done.
#pragma once

#include <cstdint>

#if defined(LOOM_ISA_EMULATION)
#include "kernels/cpu/emulation/amx_tile_model.h"
#endif

namespace loom::cpu::amx {

// Tile registers tmm0..tmm7.
constexpr int kNumTiles = 8;

// The 64-byte tile configuration that ldtilecfg reads (palette 1: up to 16 rows of up to 64
// bytes per tile). Entries 8..15 of colsb and rows, start_row and the reserved bytes must be 0.
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];  // bytes per row of tile t
  uint8_t rows[16];    // rows of tile t
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads exactly 64 bytes");

// ldtilecfg: configures every tile from `config` (and zeroes their contents).
inline void TileLoadConfig(const TileConfig& config) {
#if defined(LOOM_ISA_EMULATION)
  isa_emulation::LoadTileConfig(&config);
#else
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
#endif
}

// tilerelease: returns the tiles to their initial (unconfigured) state.
inline void TileRelease() {
#if defined(LOOM_ISA_EMULATION)
  isa_emulation::ReleaseTiles();
#else
  __asm__ volatile("tilerelease" : : : "memory");
#endif
}

// tilezero tmm[kTile].
template <int kTile>
inline void TileZero() {
  static_assert(kTile >= 0 && kTile < kNumTiles);
#if defined(LOOM_ISA_EMULATION)
  isa_emulation::TileZero(kTile);
#else
  __asm__ volatile("tilezero %%tmm%c0" : : "i"(kTile));
#endif
}

// tileloadd: tmm[kTile] row r = the tile's colsb bytes at base + r * stride (stride in bytes).
template <int kTile>
inline void TileLoad(const void* base, int64_t stride) {
  static_assert(kTile >= 0 && kTile < kNumTiles);
#if defined(LOOM_ISA_EMULATION)
  isa_emulation::TileLoad(kTile, base, stride);
#else
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2"
                   :
                   : "r"(base), "r"(stride), "i"(kTile)
                   : "memory");
#endif
}

// tilestored: the tile's rows to base + r * stride (stride in bytes).
template <int kTile>
inline void TileStore(void* base, int64_t stride) {
  static_assert(kTile >= 0 && kTile < kNumTiles);
#if defined(LOOM_ISA_EMULATION)
  isa_emulation::TileStore(kTile, base, stride);
#else
  __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)"
                   :
                   : "r"(base), "r"(stride), "i"(kTile)
                   : "memory");
#endif
}

// tdpbf16ps: tmm[kC] += tmm[kA] · tmm[kB] (bf16 pairs, f32 accumulate). kA holds rows × (pairs
// of k), kB the VNNI layout (row r: the k pair (2r, 2r + 1) of each column). The three registers
// must differ (#UD otherwise).
template <int kC, int kA, int kB>
inline void TileDpBf16() {
  static_assert(kC >= 0 && kC < kNumTiles && kA >= 0 && kA < kNumTiles && kB >= 0 &&
                kB < kNumTiles);
  static_assert(kC != kA && kC != kB && kA != kB, "tdpbf16ps needs three different tiles");
#if defined(LOOM_ISA_EMULATION)
  isa_emulation::TileDpBf16(kC, kA, kB);
#else
  __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(kC), "i"(kA), "i"(kB));
#endif
}

}  // namespace loom::cpu::amx
