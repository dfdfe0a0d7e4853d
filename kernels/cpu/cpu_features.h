// Which instruction sets the CPU and the operating system let loom use, decided once at run time.
//
// The CPU kernels are compiled several times with different instruction sets (AVX2 baseline,
// AVX-512, AMX); `DetectCpuFeatures` reads CPUID and XCR0 and `SelectIsa` picks the best level
// that is usable, capped by the environment variable LOOM_CPU_ISA (avx2 | avx512 | amx) so tests
// and benchmarks can force a lower path on a machine that has a higher one. Nothing is assumed
// about the build machine's CPU.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom::cpu {

// Who made the CPU (CPUID leaf 0): some kernels' memory access pattern is tuned per vendor
// (matmul.h, GemvLayout).
enum class CpuVendor : uint8_t { kOther, kIntel, kAmd };

struct CpuFeatures {
  CpuVendor vendor = CpuVendor::kOther;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512bf16 = false;
  bool avx512vnni = false;  // vpdpbusd / vpdpwssd (every AVX512_BF16 part has it)
  bool avx512fp16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;
  // True once the kernel granted this process the AMX tile data state (arch_prctl).
  bool amx_permitted = false;
};

// Instruction-set levels the kernels are built for, lowest first.
enum class Isa : int {
  kScalar = 0,  // portable C++, no SIMD assumptions (also the reference for dispatch tests)
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512 F/BW/VL/DQ + AVX512-BF16 + AVX512-VNNI
  kAmx = 3,     // kAvx512 + AMX-TILE + AMX-BF16
};

// Reads CPUID/XCR0 and, when the CPU has AMX, asks the kernel for permission to use it. In the
// ISA-emulation build of the kernels (LOOM_ISA_EMULATION, tests only) it reports every feature.
CpuFeatures DetectCpuFeatures();

// Highest level fully supported by `features`.
Isa MaxIsa(const CpuFeatures& features);

// The level kernels dispatch to: MaxIsa of this machine, capped by LOOM_CPU_ISA when set.
// Computed once; cheap to call.
Isa SelectedIsa();

std::string_view IsaName(Isa isa);

// One line naming the detected features and the selected level, for logs and benchmark JSON.
std::string DescribeCpu();

}  // namespace loom::cpu
