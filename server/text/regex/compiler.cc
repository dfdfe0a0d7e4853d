#include "server/text/regex/compiler.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "engine/common/status.h"
#include "engine/common/utf8.h"

namespace loom::text::regex_internal {
namespace {

// The code points a node's match can start with, and whether it can match empty (then the
// first consumed code point may come from what follows the node).
struct FirstInfo {
  CodePointSet set;
  bool nullable = true;
};

// Minimum and maximum number of code points a node's match spans (max kInfinite: unbounded).
void Widths(const Node& node, int* min, int* max) {
  constexpr long long kCap = 1 << 20;  // wider lookbehinds are treated as unbounded
  switch (node.kind) {
    case NodeKind::kEmpty:
    case NodeKind::kAssert:
    case NodeKind::kLook:
      *min = *max = 0;
      return;
    case NodeKind::kLiteral:
      *min = *max = static_cast<int>(node.text.size());
      return;
    case NodeKind::kClass:
    case NodeKind::kAnyChar:
      *min = *max = 1;
      return;
    case NodeKind::kAtomic:
      Widths(*node.children[0], min, max);
      return;
    case NodeKind::kConcat:
    case NodeKind::kAlternate: {
      const bool concat = node.kind == NodeKind::kConcat;
      long long lo = concat ? 0 : kCap, hi = 0;
      for (const auto& child : node.children) {
        int cmin = 0, cmax = 0;
        Widths(*child, &cmin, &cmax);
        lo = concat ? std::min(lo + cmin, kCap) : std::min<long long>(lo, cmin);
        if (hi == kInfinite || cmax == kInfinite) hi = kInfinite;
        else hi = concat ? hi + cmax : std::max<long long>(hi, cmax);
        if (hi > kCap) hi = kInfinite;
      }
      *min = static_cast<int>(lo);
      *max = static_cast<int>(hi);
      return;
    }
    case NodeKind::kRepeat: {
      int cmin = 0, cmax = 0;
      Widths(*node.children[0], &cmin, &cmax);
      *min = static_cast<int>(std::min<long long>(1LL * cmin * node.min, kCap));
      if (cmax == 0) {
        *max = 0;
      } else if (cmax == kInfinite || node.max == kInfinite ||
                 1LL * cmax * node.max > kCap) {
        *max = kInfinite;
      } else {
        *max = cmax * node.max;
      }
      return;
    }
  }
}

class Compiler {
 public:
  explicit Compiler(const ParsedPattern& pattern) : pattern_(pattern) {}

  absl::StatusOr<Program> Compile() {
    LOOM_RETURN_IF_ERROR(Emit(*pattern_.root));
    Append(Inst{.op = Op::kMatch});
    if (program_.insts.size() > kMaxProgramInsts) return TooLarge();
    if (too_many_classes_) {
      return absl::InvalidArgumentError("regex: pattern has too many distinct character classes");
    }
    ThreadJumps();
    const FirstInfo& first = First(*pattern_.root);
    SetFirstBytes(first);
    program_.can_match_empty = first.nullable;
    program_.anchored_start = StartsWithTextBegin(*pattern_.root);
    return std::move(program_);
  }

 private:
  static absl::Status TooLarge() {
    return absl::InvalidArgumentError(
        "regex: pattern too large (over 2^17 instructions once expanded)");
  }
  int Append(Inst inst) {
    program_.insts.push_back(inst);
    return static_cast<int>(program_.insts.size()) - 1;
  }
  int Here() const { return static_cast<int>(program_.insts.size()); }

  // Index of the compiled class for `set`, shared between equal sets; -1 (and a compile error
  // at the end) past kMaxClasses.
  int ClassId(const CodePointSet& set) {
    if (auto it = class_index_.find(set.ranges()); it != class_index_.end()) return it->second;
    if (program_.classes.size() >= kMaxClasses) {
      too_many_classes_ = true;
      return -1;
    }
    const int id = static_cast<int>(program_.classes.size());
    program_.classes.emplace_back(set);
    class_index_.emplace(set.ranges(), id);
    return id;
  }

  // A guard class for a branch: -1 when the branch can match empty or start with anything (or
  // when guards would take the last free class slots).
  int GuardFor(const FirstInfo& info) {
    if (info.nullable || program_.classes.size() >= kMaxClasses / 2) return -1;
    if (info.set.ranges().size() == 1 && info.set.ranges()[0].first == 0 &&
        info.set.ranges()[0].second == kMaxCodePoint) {
      return -1;
    }
    return ClassId(info.set);
  }

  const FirstInfo& First(const Node& node);
  absl::Status Emit(const Node& node);
  absl::Status EmitAlternate(const Node& node);
  absl::Status EmitRepeat(const Node& node);
  absl::Status EmitLoop(const Node& child, int min, int max, bool lazy);
  absl::Status EmitSubProgram(const Node& body, Inst head);
  void SetFirstBytes(const FirstInfo& first);
  void ThreadJumps();
  static bool StartsWithTextBegin(const Node& node);
  // Single code point class of a node, or -1 when it is not one code point wide.
  int SingleCharClass(const Node& node);

  const ParsedPattern& pattern_;
  Program program_;
  std::map<std::vector<CodePointSet::Range>, int> class_index_;
  bool too_many_classes_ = false;
  std::map<const Node*, FirstInfo> first_cache_;
};

CodePointSet AnyCharSet(bool dot_all) {
  CodePointSet set;
  set.AddRange(0, kMaxCodePoint);
  if (!dot_all) {
    CodePointSet newline;
    newline.Add('\n');
    newline.Negate();
    set.Intersect(newline);
  }
  return set;
}

const FirstInfo& Compiler::First(const Node& node) {
  if (auto it = first_cache_.find(&node); it != first_cache_.end()) return it->second;
  FirstInfo info;
  switch (node.kind) {
    case NodeKind::kEmpty:
    case NodeKind::kAssert:
    case NodeKind::kLook:
      break;
    case NodeKind::kLiteral:
      info.set.Add(node.text[0]);
      info.nullable = false;
      break;
    case NodeKind::kClass:
      info.set = pattern_.classes[node.class_id];
      info.nullable = false;
      break;
    case NodeKind::kAnyChar:
      info.set = AnyCharSet(node.dot_all);
      info.nullable = false;
      break;
    case NodeKind::kConcat:
      for (const auto& child : node.children) {
        const FirstInfo& c = First(*child);
        info.set.AddSet(c.set);
        if (!c.nullable) {
          info.nullable = false;
          break;
        }
      }
      break;
    case NodeKind::kAlternate:
      info.nullable = false;
      for (const auto& child : node.children) {
        const FirstInfo& c = First(*child);
        info.set.AddSet(c.set);
        info.nullable = info.nullable || c.nullable;
      }
      break;
    case NodeKind::kRepeat:
    case NodeKind::kAtomic: {
      const FirstInfo& c = First(*node.children[0]);
      info.set = c.set;
      info.nullable = c.nullable || (node.kind == NodeKind::kRepeat && node.min == 0);
      break;
    }
  }
  return first_cache_.emplace(&node, std::move(info)).first->second;
}

int Compiler::SingleCharClass(const Node& node) {
  switch (node.kind) {
    case NodeKind::kClass:
      return ClassId(pattern_.classes[node.class_id]);
    case NodeKind::kAnyChar:
      return ClassId(AnyCharSet(node.dot_all));
    case NodeKind::kLiteral:
      if (node.text.size() == 1) {
        CodePointSet set;
        set.Add(node.text[0]);
        return ClassId(set);
      }
      return -1;
    default:
      return -1;
  }
}

absl::Status Compiler::Emit(const Node& node) {
  if (program_.insts.size() > kMaxProgramInsts) return TooLarge();
  switch (node.kind) {
    case NodeKind::kEmpty:
      return absl::OkStatus();
    case NodeKind::kLiteral: {
      std::string bytes;
      for (const char32_t cp : node.text) AppendUtf8(cp, &bytes);
      const auto offset = static_cast<int32_t>(program_.strings.size());
      program_.strings += bytes;
      Append(Inst{.op = Op::kString, .a = offset, .b = static_cast<int32_t>(bytes.size())});
      return absl::OkStatus();
    }
    case NodeKind::kClass:
    case NodeKind::kAnyChar:
      Append(Inst{.op = Op::kClass, .a = SingleCharClass(node)});
      return absl::OkStatus();
    case NodeKind::kConcat:
      for (const auto& child : node.children) LOOM_RETURN_IF_ERROR(Emit(*child));
      return absl::OkStatus();
    case NodeKind::kAlternate:
      return EmitAlternate(node);
    case NodeKind::kRepeat:
      return EmitRepeat(node);
    case NodeKind::kAssert:
      Append(Inst{.op = Op::kAssert, .aux = static_cast<uint8_t>(node.assert_kind)});
      return absl::OkStatus();
    case NodeKind::kLook: {
      Inst head{.op = Op::kLook, .aux = static_cast<uint8_t>(node.behind ? 1 : 0),
                .negate = node.negate};
      if (node.behind) {
        int min = 0, max = 0;
        Widths(*node.children[0], &min, &max);
        head.b = min;
        head.c = max;
      }
      return EmitSubProgram(*node.children[0], head);
    }
    case NodeKind::kAtomic:
      return EmitSubProgram(*node.children[0], Inst{.op = Op::kAtomic});
  }
  return absl::OkStatus();
}

// Each branch but the last: Split(x = branch, y = next split), branch, Jmp end.
absl::Status Compiler::EmitAlternate(const Node& node) {
  std::vector<int> jumps;
  const size_t n = node.children.size();
  // rest_guards[i]: guard for "one of the branches after i".
  std::vector<int> rest_guards(n, -1);
  FirstInfo rest;
  rest.nullable = false;
  for (size_t i = n - 1; i > 0; --i) {
    const FirstInfo& f = First(*node.children[i]);
    rest.set.AddSet(f.set);
    rest.nullable = rest.nullable || f.nullable;
    rest_guards[i - 1] = GuardFor(rest);
  }
  for (size_t i = 0; i < n; ++i) {
    const Node& branch = *node.children[i];
    if (i + 1 == n) {
      LOOM_RETURN_IF_ERROR(Emit(branch));
      break;
    }
    const int split = Append(Inst{.op = Op::kSplit});
    program_.insts[split].x = Here();
    program_.insts[split].guard_x = GuardFor(First(branch));
    program_.insts[split].guard_y = rest_guards[i];
    LOOM_RETURN_IF_ERROR(Emit(branch));
    jumps.push_back(Append(Inst{.op = Op::kJmp}));
    program_.insts[split].y = Here();
  }
  for (const int j : jumps) program_.insts[j].x = Here();
  return absl::OkStatus();
}

absl::Status Compiler::EmitRepeat(const Node& node) {
  const Node& child = *node.children[0];
  if (const int cls = SingleCharClass(child); cls >= 0) {
    Append(Inst{.op = Op::kRepeat, .aux = static_cast<uint8_t>(node.greed), .a = cls,
                .b = node.min, .c = node.max});
    return absl::OkStatus();
  }
  if (node.greed == Greed::kPossessive) {
    // x*+ is (?>x*).
    const int at = Append(Inst{.op = Op::kAtomic});
    LOOM_RETURN_IF_ERROR(EmitLoop(child, node.min, node.max, /*lazy=*/false));
    Append(Inst{.op = Op::kMatch});
    program_.insts[at].y = Here();
    return absl::OkStatus();
  }
  return EmitLoop(child, node.min, node.max, node.greed == Greed::kLazy);
}

absl::Status Compiler::EmitLoop(const Node& child, int min, int max, bool lazy) {
  for (int i = 0; i < min; ++i) {
    LOOM_RETURN_IF_ERROR(Emit(child));
    if (program_.insts.size() > kMaxProgramInsts) return TooLarge();
  }
  const FirstInfo& first = First(child);
  const int guard = GuardFor(first);
  if (max == kInfinite) {
    const int reg = first.nullable ? program_.num_regs++ : -1;
    const int split = Append(Inst{.op = Op::kSplit});
    if (reg >= 0) Append(Inst{.op = Op::kSaveLoop, .a = reg});
    const int body = split + 1;
    LOOM_RETURN_IF_ERROR(Emit(child));
    int check = -1;
    if (reg >= 0) check = Append(Inst{.op = Op::kLoopCheck, .a = reg});
    Append(Inst{.op = Op::kJmp, .x = split});
    const int exit = Here();
    Inst& s = program_.insts[split];
    if (lazy) {
      s.x = exit;
      s.y = body;
      s.guard_y = guard;
    } else {
      s.x = body;
      s.y = exit;
      s.guard_x = guard;
    }
    if (check >= 0) program_.insts[check].y = exit;
    return absl::OkStatus();
  }
  std::vector<int> splits;
  for (int i = min; i < max; ++i) {
    const int split = Append(Inst{.op = Op::kSplit});
    splits.push_back(split);
    LOOM_RETURN_IF_ERROR(Emit(child));
    if (program_.insts.size() > kMaxProgramInsts) return TooLarge();
  }
  const int exit = Here();
  for (const int split : splits) {
    Inst& s = program_.insts[split];
    if (lazy) {
      s.x = exit;
      s.y = split + 1;
      s.guard_y = guard;
    } else {
      s.x = split + 1;
      s.y = exit;
      s.guard_x = guard;
    }
  }
  return absl::OkStatus();
}

// Jumps to jumps go straight to the final target, and a jump to kMatch becomes kMatch: the
// alternation of a tokenizer pattern then ends each match without an extra dispatch.
void Compiler::ThreadJumps() {
  auto& insts = program_.insts;
  auto final_target = [&](int pc) {
    for (int hops = 0; insts[pc].op == Op::kJmp && hops < 64; ++hops) pc = insts[pc].x;
    return pc;
  };
  for (Inst& inst : insts) {
    if (inst.op == Op::kJmp) {
      inst.x = final_target(inst.x);
      if (insts[inst.x].op == Op::kMatch) inst = Inst{.op = Op::kMatch};
    } else if (inst.op == Op::kSplit) {
      inst.x = final_target(inst.x);
      inst.y = final_target(inst.y);
    }
  }
}

// [head: continue at y] [body...] [kMatch] y:
absl::Status Compiler::EmitSubProgram(const Node& body, Inst head) {
  const int at = Append(head);
  LOOM_RETURN_IF_ERROR(Emit(body));
  Append(Inst{.op = Op::kMatch});
  program_.insts[at].y = Here();
  return absl::OkStatus();
}

// Lead bytes of the UTF-8 encodings of the first set: a match can only start at those bytes.
void Compiler::SetFirstBytes(const FirstInfo& first) {
  auto& bytes = program_.first_byte;
  bytes.fill(false);
  if (first.nullable) {
    // Any code point boundary: every byte but continuation bytes.
    for (int b = 0; b < 0x80; ++b) bytes[b] = true;
    for (int b = 0xC0; b < 0x100; ++b) bytes[b] = true;
    return;
  }
  for (int b = 0; b < 0x80; ++b) bytes[b] = first.set.Contains(static_cast<char32_t>(b));
  auto intersects = [&](char32_t lo, char32_t hi) {
    CodePointSet range;
    range.AddRange(lo, hi);
    range.Intersect(first.set);
    return !range.empty();
  };
  for (int b = 0xC2; b <= 0xDF; ++b) {
    const char32_t lo = static_cast<char32_t>(b & 0x1F) << 6;
    bytes[b] = intersects(lo, lo + 0x3F);
  }
  for (int b = 0xE0; b <= 0xEF; ++b) {
    const char32_t lo = static_cast<char32_t>(b & 0x0F) << 12;
    bytes[b] = intersects(lo, lo + 0xFFF);
  }
  for (int b = 0xF0; b <= 0xF4; ++b) {
    const char32_t lo = static_cast<char32_t>(b & 0x07) << 18;
    bytes[b] = intersects(lo, std::min<char32_t>(lo + 0x3FFFF, kMaxCodePoint));
  }
}

bool Compiler::StartsWithTextBegin(const Node& node) {
  if (node.kind == NodeKind::kAssert) return node.assert_kind == AssertKind::kTextBegin;
  if (node.kind == NodeKind::kConcat && !node.children.empty()) {
    return StartsWithTextBegin(*node.children[0]);
  }
  return false;
}

}  // namespace

absl::StatusOr<Program> CompileProgram(const ParsedPattern& pattern) {
  Compiler compiler(pattern);
  return compiler.Compile();
}

}  // namespace loom::text::regex_internal
