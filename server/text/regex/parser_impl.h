// Internal to the regex parser: the recursive-descent Parser shared by parser.cc (structure:
// alternation, groups, quantifiers) and parser_class.cc (escapes, properties, bracket classes).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/text/regex/ast.h"
#include "server/text/regex/code_point_set.h"

namespace loom::text::regex_internal {

using NodePtr = std::unique_ptr<Node>;

// Options in effect and the lookbehind context (which restricts what may appear).
struct Options {
  bool ignore_case = false;
  bool dot_all = false;   // (?m) in Ruby syntax
  bool extended = false;  // (?x)
  bool in_lookbehind = false;           // no lookahead, \z or \Z
  bool in_positive_lookbehind = false;  // no negative lookbehind either
};

// What one escape sequence stands for.
struct Escape {
  enum class Kind { kChar, kSet, kAssert } kind = Kind::kChar;
  char32_t cp = 0;
  CodePointSet set;
  AssertKind assert_kind = AssertKind::kTextBegin;
};

inline NodePtr MakeNode(NodeKind kind) {
  auto node = std::make_unique<Node>();
  node->kind = kind;
  return node;
}

inline int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  absl::StatusOr<ParsedPattern> Parse() {
    ParsedPattern out;
    LOOM_ASSIGN_OR_RETURN(out.root, ParseAlternation(Options(), 0));
    if (pos_ < p_.size()) return Error("unmatched ')'");
    out.classes = std::move(classes_);
    return out;
  }

 private:
  absl::Status Error(std::string_view what) const { return ErrorAt(what, pos_); }
  absl::Status ErrorAt(std::string_view what, size_t at) const;

  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0';
  }
  bool Consume(char c) {
    if (Peek() != c || AtEnd()) return false;
    ++pos_;
    return true;
  }
  char32_t NextCodePoint();
  int AddClass(CodePointSet set) {
    classes_.push_back(std::move(set));
    return static_cast<int>(classes_.size()) - 1;
  }
  void SkipExtended(const Options& opts);

  absl::StatusOr<NodePtr> ParseAlternation(Options opts, int depth);
  absl::StatusOr<NodePtr> ParseConcat(Options opts, int depth);
  absl::StatusOr<NodePtr> ParseAtom(Options* opts, int depth, bool* rest_of_group);
  absl::StatusOr<NodePtr> ParseGroup(Options* opts, int depth, bool* rest_of_group);
  absl::Status ParseQuantifiers(const Options& opts, int depth, NodePtr* node);
  bool ParseInterval(int* min, int* max, absl::Status* error);
  absl::StatusOr<Escape> ParseEscape(bool in_class);
  absl::StatusOr<CodePointSet> ParseProperty(bool negated, bool in_class);
  absl::StatusOr<char32_t> ParseHex(size_t min_digits, size_t max_digits, bool braced);
  absl::StatusOr<CodePointSet> ParseClass(const Options& opts, int depth, bool top_level);
  absl::Status ParseClassItem(const Options& opts, int depth, CodePointSet* items,
                              std::vector<CodePointSet::Range>* chars);
  NodePtr LiteralNode(char32_t cp, const Options& opts);
  void ExpandMultiCharFolds(std::vector<NodePtr>* items);
  NodePtr FoldRun(const std::vector<char32_t>& cps, size_t begin, int options_left);
  NodePtr FoldedChar(char32_t cp);
  NodePtr FoldSequence(std::u32string_view fold);

  std::string_view p_;
  size_t pos_ = 0;
  std::vector<CodePointSet> classes_;
};

}  // namespace loom::text::regex_internal
