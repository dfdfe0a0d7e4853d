// The backtracking matcher that executes a Program (program.h) on one text.
//
// A Matcher is created per FindAll call: it owns the backtrack stack and the step budget, and
// is used by one thread. Each attempt at a start position gets a step budget (instructions
// executed plus code points scanned). When an attempt exhausts it, the matcher switches to
// memoized backtracking for the rest of the search, if the program allows it (no empty-loop
// registers): a (pc, position) state of the top-level program that was explored once is not
// explored again (in a search with no captures its outcome cannot differ), which bounds an
// attempt by the number of states; the attempt is retried that way. An attempt that exhausts
// its budget anyway counts as "no match at this position". The whole search also has a budget
// proportional to the text length; once it is spent, the search reports no further matches.
// The backtrack stack and the memo are capped too. Real tokenizer patterns use a small
// constant number of steps per byte and never get near these limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "server/text/regex/program.h"

namespace loom::text::regex_internal {

// Steps every start position may use, plus kStepsPerRemainingByte per byte after it.
inline constexpr int64_t kStepsPerPosition = int64_t{1} << 16;
inline constexpr int64_t kStepsPerRemainingByte = 8;
// Steps a whole search may use, plus kSearchStepsPerByte per byte of text.
inline constexpr int64_t kSearchSteps = int64_t{1} << 22;
inline constexpr int64_t kSearchStepsPerByte = 64;
// Backtrack entries an attempt may hold (24 bytes each).
inline constexpr size_t kMaxBacktrackEntries = size_t{1} << 21;
// Memo entries (4 bytes each): the memo covers this many (instruction, position) states.
inline constexpr size_t kMaxMemoEntries = size_t{1} << 22;

class Matcher {
 public:
  Matcher(const Program& program, std::string_view text);

  // Finds the leftmost match starting at or after `from`; false when there is none (or the
  // search budget is spent). Sets [*begin, *end).
  bool Search(size_t from, size_t* begin, size_t* end);

 private:
  enum class FrameKind : uint32_t { kBranch, kRestoreReg, kRepeatGreedy, kRepeatLazy };
  struct Frame {
    int32_t pc;
    FrameKind kind;
    size_t pos;
    size_t aux;
  };

  // Runs the program from `pc` at `pos` until a kMatch (whose position must equal
  // `required_end` unless that is npos); stores the end in *end.
  bool Run(int pc, size_t pos, size_t required_end, int depth, size_t* end);
  // Pops frames until one gives a state to resume; false when none is left above `base`.
  bool Backtrack(size_t base, int* pc, size_t* pos);
  bool ExecRepeat(const Inst& inst, int* pc, size_t* pos);
  bool ExecSplit(const Inst& inst, int* pc, size_t pos);
  bool ExecSubProgram(const Inst& inst, int* pc, size_t* pos, int depth);
  bool CheckAssert(uint8_t kind, size_t pos) const;
  bool RunLook(const Inst& inst, int pc, size_t pos, int depth);
  bool Push(int32_t pc, FrameKind kind, size_t pos, size_t aux);
  // Starts a fresh memo window at `base`.
  void StartMemo(size_t base);
  // True when (pc, pos) was already explored in this memo window; marks it otherwise.
  bool Visited(int pc, size_t pos);
  // Code point at pos (< text size) and its byte length.
  char32_t Decode(size_t pos, size_t* len) const;
  size_t PrevBoundary(size_t pos, size_t floor) const;

  const Program& program_;
  std::string_view text_;
  std::vector<Frame> stack_;  // the backtrack stack: entries [0, top_)
  size_t top_ = 0;
  std::vector<size_t> regs_;
  int64_t search_steps_left_;
  int64_t steps_left_ = 0;
  bool aborted_ = false;
  // The memo: memo_[(pos - memo_base_) * num_insts + pc] == memo_gen_ marks an explored state
  // for positions in [memo_base_, memo_base_ + memo_width_).
  bool memo_on_ = false;
  std::vector<uint32_t> memo_;
  uint32_t memo_gen_ = 0;
  size_t memo_base_ = 0;
  size_t memo_width_ = 0;
};

}  // namespace loom::text::regex_internal
