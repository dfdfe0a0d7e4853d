#include "server/text/regex/matcher.h"

#include <algorithm>
#include <cstring>

#include "server/text/regex/ast.h"
#include "server/text/regex/code_point_set.h"

namespace loom::text::regex_internal {
namespace {

constexpr size_t kNpos = static_cast<size_t>(-1);
// Lookaround / atomic nesting the matcher follows (the parser bounds it already).
constexpr int kMaxRunDepth = 2 * 100 + 8;

}  // namespace

Matcher::Matcher(const Program& program, std::string_view text)
    : program_(program),
      text_(text),
      regs_(static_cast<size_t>(program.num_regs), kNpos),
      search_steps_left_(kSearchSteps + kSearchStepsPerByte * static_cast<int64_t>(text.size())) {
  stack_.resize(64);
}

// Decodes without validation (the text is well-formed UTF-8); stays inside the text and makes
// progress even on ill-formed bytes.
inline char32_t Matcher::Decode(size_t pos, size_t* len) const {
  const auto* s = reinterpret_cast<const uint8_t*>(text_.data());
  const size_t n = text_.size();
  const uint8_t b0 = s[pos];
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  if (b0 >= 0xE0 && b0 < 0xF0 && pos + 2 < n) {
    *len = 3;
    return (char32_t{b0 & 0x0Fu} << 12) | (char32_t{s[pos + 1] & 0x3Fu} << 6) |
           (s[pos + 2] & 0x3Fu);
  }
  if (b0 >= 0xC0 && b0 < 0xE0 && pos + 1 < n) {
    *len = 2;
    return (char32_t{b0 & 0x1Fu} << 6) | (s[pos + 1] & 0x3Fu);
  }
  if (b0 >= 0xF0 && pos + 3 < n) {
    *len = 4;
    const char32_t cp = (char32_t{b0 & 0x07u} << 18) | (char32_t{s[pos + 1] & 0x3Fu} << 12) |
                        (char32_t{s[pos + 2] & 0x3Fu} << 6) | (s[pos + 3] & 0x3Fu);
    return cp <= kMaxCodePoint ? cp : 0xFFFD;
  }
  *len = 1;
  return 0xFFFD;
}

size_t Matcher::PrevBoundary(size_t pos, size_t floor) const {
  size_t p = pos - 1;
  while (p > floor && (static_cast<uint8_t>(text_[p]) & 0xC0) == 0x80 && pos - p < 4) --p;
  return p;
}

inline bool Matcher::Push(int32_t pc, FrameKind kind, size_t pos, size_t aux) {
  if (top_ == stack_.size()) {
    if (top_ >= kMaxBacktrackEntries) {
      aborted_ = true;
      return false;
    }
    stack_.resize(std::min(2 * stack_.size(), kMaxBacktrackEntries));
  }
  stack_[top_++] = Frame{pc, kind, pos, aux};
  return true;
}

bool Matcher::CheckAssert(uint8_t kind, size_t pos) const {
  const size_t n = text_.size();
  auto word_before = [&] {
    if (pos == 0) return false;
    size_t len = 0;
    const size_t start = PrevBoundary(pos, 0);
    return IsWordChar(Decode(start, &len));
  };
  auto word_after = [&] {
    size_t len = 0;
    return pos < n && IsWordChar(Decode(pos, &len));
  };
  switch (static_cast<AssertKind>(kind)) {
    // Oniguruma: '^' never matches at the end of the text, even after a final '\n'.
    case AssertKind::kLineBegin: return pos == 0 || (text_[pos - 1] == '\n' && pos < n);
    case AssertKind::kLineEnd: return pos == n || text_[pos] == '\n';
    case AssertKind::kTextBegin: return pos == 0;
    case AssertKind::kTextEnd: return pos == n;
    case AssertKind::kTextEndNl: return pos == n || (pos + 1 == n && text_[pos] == '\n');
    case AssertKind::kWordBoundary: return word_before() != word_after();
    case AssertKind::kNotWordBoundary: return word_before() == word_after();
  }
  return false;
}

// Lookahead runs the sub-program at pos; lookbehind runs it from each start that lies a
// possible number of code points back and requires it to end exactly at pos.
bool Matcher::RunLook(const Inst& inst, int pc, size_t pos, int depth) {
  size_t end = 0;
  if (inst.aux == 0) return Run(pc + 1, pos, kNpos, depth + 1, &end);
  const int min = inst.b;
  const int max = inst.c;
  size_t start = pos;
  for (int width = 0; max == kInfinite || width <= max; ++width) {
    if (width >= min && Run(pc + 1, start, pos, depth + 1, &end)) return true;
    if (aborted_ || start == 0) return false;
    start = PrevBoundary(start, 0);
  }
  return false;
}

bool Matcher::Backtrack(size_t base, int* pc, size_t* pos) {
  while (top_ > base) {
    const Frame f = stack_[--top_];
    switch (f.kind) {
      case FrameKind::kBranch:
        *pc = f.pc;
        *pos = f.pos;
        return true;
      case FrameKind::kRestoreReg:
        regs_[static_cast<size_t>(f.pc)] = f.aux;
        break;
      case FrameKind::kRepeatGreedy: {
        // f.pos: where the repeat stopped; f.aux: the position after its minimum count.
        const size_t p = PrevBoundary(f.pos, f.aux);
        if (p > f.aux) stack_[top_++] = Frame{f.pc, f.kind, p, f.aux};  // reuses f's slot
        *pc = f.pc;
        *pos = p;
        return true;
      }
      case FrameKind::kRepeatLazy: {
        // f.pc: the kRepeat instruction; f.aux: items matched so far.
        const Inst& inst = program_.insts[static_cast<size_t>(f.pc)];
        if ((inst.c != kInfinite && f.aux >= static_cast<size_t>(inst.c)) ||
            f.pos >= text_.size()) {
          break;
        }
        size_t len = 0;
        if (!program_.classes[static_cast<size_t>(inst.a)].Contains(Decode(f.pos, &len))) break;
        stack_[top_++] = Frame{f.pc, f.kind, f.pos + len, f.aux + 1};  // reuses f's slot
        *pc = f.pc + 1;
        *pos = f.pos + len;
        return true;
      }
    }
    if (--steps_left_ < 0) {
      aborted_ = true;
      return false;
    }
  }
  return false;
}

// Scans as many items as the greed allows and leaves a frame to give them back one by one
// (greedy) or to take one more (lazy).
inline bool Matcher::ExecRepeat(const Inst& in, int* pc, size_t* pos) {
  const size_t n = text_.size();
  const ClassTable& cls = program_.classes[static_cast<size_t>(in.a)];
  const auto greed = static_cast<Greed>(in.aux);
  const int64_t limit = greed == Greed::kLazy ? in.b : in.c;
  int64_t count = 0;
  size_t p = *pos;
  size_t floor = in.b == 0 ? p : kNpos;
  while ((limit == kInfinite || count < limit) && p < n) {
    size_t len = 0;
    if (!cls.Contains(Decode(p, &len))) break;
    p += len;
    if (++count == in.b) floor = p;
  }
  steps_left_ -= count;
  if (count < in.b) return false;
  bool ok = true;
  if (greed == Greed::kGreedy && p > floor) {
    ok = Push(*pc + 1, FrameKind::kRepeatGreedy, p, floor);
  } else if (greed == Greed::kLazy) {
    ok = Push(*pc, FrameKind::kRepeatLazy, p, static_cast<size_t>(count));
  }
  *pos = p;
  ++*pc;
  return ok;
}

// Takes x when its guard admits the next code point, leaving y as the alternative when its
// guard does; a branch whose first code point cannot match is never tried.
inline bool Matcher::ExecSplit(const Inst& in, int* pc, size_t pos) {
  const size_t n = text_.size();
  const auto& classes = program_.classes;
  size_t len = 0;
  const char32_t cp = pos < n ? Decode(pos, &len) : 0;
  const bool x_ok =
      in.guard_x < 0 || (pos < n && classes[static_cast<size_t>(in.guard_x)].Contains(cp));
  const bool y_ok =
      in.guard_y < 0 || (pos < n && classes[static_cast<size_t>(in.guard_y)].Contains(cp));
  if (x_ok) {
    *pc = in.x;
    return !y_ok || Push(in.y, FrameKind::kBranch, pos, 0);
  }
  *pc = in.y;
  return y_ok;
}

// Lookarounds test their sub-program at pos; an atomic group moves pos to the end of its
// sub-program's first match. Either way nothing inside is backtracked into afterwards.
bool Matcher::ExecSubProgram(const Inst& in, int* pc, size_t* pos, int depth) {
  const int sub = *pc;
  *pc = in.y;
  if (in.op == Op::kLook) return RunLook(in, sub, *pos, depth) != in.negate && !aborted_;
  size_t sub_end = 0;
  if (!Run(sub + 1, *pos, kNpos, depth + 1, &sub_end)) return false;
  *pos = sub_end;
  return true;
}

bool Matcher::Run(int pc, size_t pos, size_t required_end, int depth, size_t* end) {
  if (depth > kMaxRunDepth) {
    aborted_ = true;
    return false;
  }
  const size_t base = top_;
  const size_t n = text_.size();
  const Inst* insts = program_.insts.data();
  const auto& classes = program_.classes;
  while (true) {
    bool ok = true;
    if (--steps_left_ < 0 || aborted_) {
      aborted_ = true;
      top_ = base;
      return false;
    }
    if (memo_on_ && depth == 0 && Visited(pc, pos)) {
      if (!Backtrack(base, &pc, &pos)) {
        top_ = base;
        return false;
      }
      continue;
    }
    const Inst& in = insts[pc];
    switch (in.op) {
      case Op::kString: {
        const auto len = static_cast<size_t>(in.b);
        ok = n - pos >= len &&
             std::memcmp(text_.data() + pos, program_.strings.data() + in.a, len) == 0;
        if (ok) {
          pos += len;
          ++pc;
        }
        break;
      }
      case Op::kClass: {
        size_t len = 0;
        ok = pos < n && classes[static_cast<size_t>(in.a)].Contains(Decode(pos, &len));
        if (ok) {
          pos += len;
          ++pc;
        }
        break;
      }
      case Op::kRepeat:
        ok = ExecRepeat(in, &pc, &pos);
        break;
      case Op::kSplit:
        ok = ExecSplit(in, &pc, pos);
        break;
      case Op::kJmp:
        pc = in.x;
        break;
      case Op::kAssert:
        ok = CheckAssert(in.aux, pos);
        ++pc;
        break;
      case Op::kLook:
      case Op::kAtomic:
        ok = ExecSubProgram(in, &pc, &pos, depth);
        break;
      case Op::kSaveLoop:
        ok = Push(in.a, FrameKind::kRestoreReg, 0, regs_[static_cast<size_t>(in.a)]);
        regs_[static_cast<size_t>(in.a)] = pos;
        ++pc;
        break;
      case Op::kLoopCheck:
        pc = regs_[static_cast<size_t>(in.a)] == pos ? in.y : pc + 1;
        break;
      case Op::kMatch:
        if (required_end == kNpos || pos == required_end) {
          *end = pos;
          top_ = base;
          return true;
        }
        ok = false;
        break;
    }
    if (!ok && (aborted_ || !Backtrack(base, &pc, &pos))) {
      top_ = base;
      return false;
    }
  }
}

void Matcher::StartMemo(size_t base) {
  const size_t num_insts = program_.insts.size();
  if (++memo_gen_ == 0) {  // wrapped: old stamps could collide
    std::fill(memo_.begin(), memo_.end(), 0);
    memo_gen_ = 1;
  }
  memo_base_ = base;
  memo_width_ = std::min(text_.size() - base + 1, kMaxMemoEntries / num_insts);
  if (memo_.size() < memo_width_ * num_insts) memo_.resize(memo_width_ * num_insts, 0);
}

inline bool Matcher::Visited(int pc, size_t pos) {
  if (pos < memo_base_ || pos - memo_base_ >= memo_width_) return false;
  uint32_t& stamp = memo_[(pos - memo_base_) * program_.insts.size() + static_cast<size_t>(pc)];
  if (stamp == memo_gen_) return true;
  stamp = memo_gen_;
  return false;
}

// Every attempt of one Search before the successful one failed, so the states they explored
// are failures for later attempts too; the memo is therefore kept across the attempts of one
// Search (and restarted for the next, whose window the successful attempt may have marked).
bool Matcher::Search(size_t from, size_t* begin, size_t* end) {
  const size_t n = text_.size();
  const auto* bytes = reinterpret_cast<const uint8_t*>(text_.data());
  if (memo_on_) StartMemo(from);
  for (size_t start = from; start <= n; ++start) {
    if (program_.anchored_start && start > 0) return false;
    if (start < n && !program_.first_byte[bytes[start]]) continue;
    if (start == n && !program_.can_match_empty) return false;
    if (search_steps_left_ <= 0) return false;
    if (memo_on_ && start >= memo_base_ + memo_width_ / 2 && start > memo_base_) {
      StartMemo(start);
    }
    const int64_t budget = std::min(
        search_steps_left_,
        kStepsPerPosition + kStepsPerRemainingByte * static_cast<int64_t>(n - start));
    steps_left_ = budget;
    aborted_ = false;
    const bool found = Run(0, start, kNpos, 0, end);
    search_steps_left_ -= budget - std::max<int64_t>(steps_left_, 0);
    if (found && !aborted_) {
      *begin = start;
      return true;
    }
    top_ = 0;
    if (aborted_ && !memo_on_ && program_.num_regs == 0) {
      // Retry this start (and search on) with the memo.
      memo_on_ = true;
      StartMemo(start);
      --start;
    }
  }
  return false;
}

}  // namespace loom::text::regex_internal
