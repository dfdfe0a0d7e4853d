// The x86 SIMD intrinsics of the AVX-512 and AMX translation units (files ending in _avx512.cc
// and _amx.cc, and the headers only they include).
//
// Real build: exactly <immintrin.h>; the file's ISA flags (kernels/CMakeLists.txt) let the
// compiler emit the AVX-512 instructions, and nothing else changes.
//
// ISA emulation (LOOM_ISA_EMULATION, the loom_kernels_cpu_emulated library that only tests link):
// the same names come from SIMDe's portable AVX-512 (simde/x86/avx512.h with native aliases: an
// `_mm512_add_ps(a, b)` call becomes `simde_mm512_add_ps(a, b)`), plus the few intrinsics that
// SIMDe lacks, from kernels/cpu/emulation/simde_extras.h. Those files are then compiled with AVX2
// flags only, so the AVX-512 code paths run, instruction for instruction in their C++ form, on any
// AVX2 machine. What that proves and what it does not: engine/README.md, "CPU kernels".
//
// Include this instead of <immintrin.h> in every file that uses AVX-512 intrinsics; AVX2-only
// files keep <immintrin.h>.
#pragma once

#if defined(LOOM_ISA_EMULATION)
#include "kernels/cpu/emulation/simde_extras.h"
#else
#include <immintrin.h>
#endif
