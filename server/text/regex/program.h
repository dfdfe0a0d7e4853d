// The compiled form of a regex: instructions for the backtracking matcher (matcher.h).
//
// Control flow is explicit (kSplit / kJmp), as in a Thompson/Pike program, but the program is
// executed depth-first with a backtrack stack, which gives Oniguruma's leftmost-first
// (priority) semantics. Runs of one single-character item (\p{L}+, \s*, [^...]{1,3}) are one
// kRepeat instruction, which scans forward and backtracks by stepping back one code point.
// Lookarounds and atomic groups are sub-programs placed inline after their instruction and
// terminated by kMatch. Immutable after compilation; shared by every thread that matches.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/text/regex/code_point_set.h"

namespace loom::text::regex_internal {

// Membership test for one class: a bitmap over the Basic Multilingual Plane and the ranges
// above it (few in practice; binary search).
class ClassTable {
 public:
  explicit ClassTable(const CodePointSet& set);

  bool Contains(char32_t cp) const {
    if (cp < 0x10000) return (bmp_[cp >> 6] >> (cp & 63)) & 1;
    return ContainsAstral(cp);
  }

 private:
  bool ContainsAstral(char32_t cp) const;

  std::vector<uint64_t> bmp_;  // 1024 words
  std::vector<CodePointSet::Range> astral_;
};

enum class Op : uint8_t {
  kString,     // the bytes strings[a, a + b) must follow
  kClass,      // one code point of classes[a]
  kRepeat,     // classes[a] repeated min=b to max=c (kInfinite) times, `greed`
  kSplit,      // try x, then y; x needs the next code point in classes[guard_x] when >= 0
  kJmp,        // continue at x
  kAssert,     // zero-width test `assert_kind`
  kLook,       // sub-program at pc + 1; continue at y when it matches (xor `negate`)
  kAtomic,     // sub-program at pc + 1; continue at y from its first match's end
  kSaveLoop,   // regs[a] = position (undone on backtracking)
  kLoopCheck,  // an iteration that consumed nothing ends the loop: continue at y
  kMatch,      // success (a sub-program's end when it follows kLook / kAtomic)
};

struct Inst {
  Op op = Op::kMatch;
  uint8_t aux = 0;  // Greed for kRepeat, AssertKind for kAssert, 1 = lookbehind for kLook
  bool negate = false;
  int32_t x = 0;
  int32_t y = 0;
  int32_t guard_x = -1;
  int32_t guard_y = -1;
  int32_t a = 0;
  int32_t b = 0;
  int32_t c = 0;
};

struct Program {
  std::vector<Inst> insts;  // entry at 0
  std::string strings;      // literal bytes for kString
  std::vector<ClassTable> classes;
  int num_regs = 0;
  // Lead bytes at which a match can start (all true when the pattern can match empty).
  std::array<bool, 256> first_byte{};
  bool can_match_empty = true;
  bool anchored_start = false;  // the pattern begins with \A: only offset 0 can match
};

// Largest number of instructions a pattern may compile to (counted repeats are expanded).
inline constexpr size_t kMaxProgramInsts = 1 << 17;

// Largest number of distinct character classes (8 KiB of bitmap each) in one program.
inline constexpr size_t kMaxClasses = 2048;

}  // namespace loom::text::regex_internal
