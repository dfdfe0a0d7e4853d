#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace loom::cpu {
namespace {

#if !defined(LOOM_ISA_EMULATION)
constexpr int kArchReqXcompPerm = 0x1023;  // arch_prctl: request an extended state component
constexpr int kXfeatureXtileData = 18;     // AMX tile data

uint64_t ReadXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

bool Bit(uint32_t reg, int bit) { return (reg >> bit) & 1u; }
#endif

std::string CpuModelName() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

}  // namespace

#if defined(LOOM_ISA_EMULATION)

// The ISA-emulation build (kernels/cpu/x86_intrinsics.h, amx_tiles.h) runs every level on any
// AVX2 machine, so it reports every feature: dispatch and the tests' "is this level supported"
// checks then pick the emulated AVX-512 and AMX paths. No CPUID, no arch_prctl.
CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  f.avx512bf16 = f.avx512vnni = f.avx512fp16 = true;
  f.amx_tile = f.amx_bf16 = f.amx_int8 = f.amx_permitted = true;
  return f;
}

#else

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
  uint32_t eax, ebx, ecx, edx;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    char vendor[13] = {};
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    if (std::strcmp(vendor, "GenuineIntel") == 0) f.vendor = CpuVendor::kIntel;
    if (std::strcmp(vendor, "AuthenticAMD") == 0) f.vendor = CpuVendor::kAmd;
  }
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = Bit(ecx, 27);
  const bool has_fma = Bit(ecx, 12);
  const bool has_f16c = Bit(ecx, 29);
  const bool has_avx = Bit(ecx, 28);
  if (!osxsave || !has_avx) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;             // SSE and AVX state
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG, XTILEDATA
  if (!os_ymm) return f;

  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = Bit(ebx, 5);
  f.fma = has_fma;
  f.f16c = has_f16c;
  if (os_zmm) {
    f.avx512f = Bit(ebx, 16);
    f.avx512dq = Bit(ebx, 17);
    f.avx512bw = Bit(ebx, 30);
    f.avx512vl = Bit(ebx, 31);
    f.avx512fp16 = Bit(edx, 23);
    f.avx512vnni = Bit(ecx, 11);
  }
  const bool amx_bf16 = Bit(edx, 22);
  const bool amx_tile = Bit(edx, 24);
  const bool amx_int8 = Bit(edx, 25);
  uint32_t eax1, ebx1, ecx1, edx1;
  __cpuid_count(7, 1, eax1, ebx1, ecx1, edx1);
  f.avx512bf16 = os_zmm && Bit(eax1, 5);
  if (os_amx) {
    f.amx_tile = amx_tile;
    f.amx_bf16 = amx_bf16;
    f.amx_int8 = amx_int8;
  }
  if (f.amx_tile) {
    // Linux hands out the AMX state only on request; without it the first tile load faults.
    f.amx_permitted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
  }
  return f;
}

#endif  // LOOM_ISA_EMULATION

Isa MaxIsa(const CpuFeatures& f) {
  if (!(f.avx2 && f.fma && f.f16c)) return Isa::kScalar;
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512bf16 &&
        f.avx512vnni)) {
    return Isa::kAvx2;
  }
  if (!(f.amx_tile && f.amx_bf16 && f.amx_permitted)) return Isa::kAvx512;
  return Isa::kAmx;
}

Isa SelectedIsa() {
  static const Isa selected = [] {
    Isa isa = MaxIsa(DetectCpuFeatures());
    if (const char* cap = std::getenv("LOOM_CPU_ISA")) {
      Isa limit = isa;
      if (std::strcmp(cap, "scalar") == 0) limit = Isa::kScalar;
      if (std::strcmp(cap, "avx2") == 0) limit = Isa::kAvx2;
      if (std::strcmp(cap, "avx512") == 0) limit = Isa::kAvx512;
      if (std::strcmp(cap, "amx") == 0) limit = Isa::kAmx;
      if (static_cast<int>(limit) < static_cast<int>(isa)) isa = limit;
    }
    return isa;
  }();
  return selected;
}

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

std::string DescribeCpu() {
  const CpuFeatures f = DetectCpuFeatures();
  std::string out = CpuModelName();
#if defined(LOOM_ISA_EMULATION)
  out += " (ISA emulation)";
#endif
  out += " [";
  const std::pair<const char*, bool> flags[] = {
      {"avx2", f.avx2},
      {"fma", f.fma},
      {"f16c", f.f16c},
      {"avx512f", f.avx512f},
      {"avx512bw", f.avx512bw},
      {"avx512bf16", f.avx512bf16},
      {"avx512vnni", f.avx512vnni},
      {"avx512fp16", f.avx512fp16},
      {"amx-bf16", f.amx_bf16},
      {"amx-int8", f.amx_int8},
  };
  bool first = true;
  for (const auto& [name, present] : flags) {
    if (!present) continue;
    if (!first) out += ' ';
    out += name;
    first = false;
  }
  out += "] isa=";
  out += IsaName(SelectedIsa());
  return out;
}

}  // namespace loom::cpu
