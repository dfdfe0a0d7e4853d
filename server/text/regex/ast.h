// The syntax tree the regex parser produces and the compiler consumes.
//
// Case-insensitive literals are already resolved by the parser (they become classes holding
// their case-fold equivalents), so the tree has no option state left. Plain data.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "server/text/regex/code_point_set.h"

namespace loom::text::regex_internal {

enum class NodeKind : uint8_t {
  kEmpty,      // matches the empty string
  kLiteral,    // `text`, case-sensitively
  kClass,      // one code point of classes[class_id]
  kAnyChar,    // any code point but '\n' (any at all when dot_all)
  kConcat,     // children in sequence
  kAlternate,  // the first child that leads to an overall match
  kRepeat,     // children[0] between min and max (kInfinite) times
  kAssert,     // a zero-width position test
  kLook,       // lookahead / lookbehind of children[0]
  kAtomic,     // children[0] without backtracking into it: (?>...)
};

enum class AssertKind : uint8_t {
  kLineBegin,     // ^: start of text or after a '\n' that does not end the text
  kLineEnd,       // $: end of text or before '\n'
  kTextBegin,     // \A
  kTextEnd,       // \z
  kTextEndNl,     // \Z: end of text or before a final '\n'
  kWordBoundary,  // \b
  kNotWordBoundary,  // \B
};

enum class Greed : uint8_t { kGreedy, kLazy, kPossessive };

inline constexpr int kInfinite = -1;

struct Node {
  NodeKind kind = NodeKind::kEmpty;
  std::vector<char32_t> text;  // kLiteral
  int class_id = -1;           // kClass
  bool dot_all = false;        // kAnyChar
  int min = 0;                 // kRepeat
  int max = 0;                 // kRepeat; kInfinite for no bound
  Greed greed = Greed::kGreedy;
  AssertKind assert_kind = AssertKind::kTextBegin;
  bool behind = false;  // kLook
  bool negate = false;  // kLook
  // A literal under (?i) (kClass holding its case-fold equivalents, or kLiteral when it has
  // none); `text` holds the pattern's code point. Runs of these get multi-character folds.
  bool folded_literal = false;
  // The body of a capturing or option group ((...), (?i:...)): Oniguruma lets those be repeated
  // even when they are zero-width.
  bool enclosed = false;
  std::vector<std::unique_ptr<Node>> children;
};

// A parsed pattern: the tree and the classes its kClass nodes index.
struct ParsedPattern {
  std::unique_ptr<Node> root;
  std::vector<CodePointSet> classes;
};

}  // namespace loom::text::regex_internal
