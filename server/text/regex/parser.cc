#include "server/text/regex/parser.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/regex/parser_impl.h"
#include "engine/common/utf8.h"

namespace loom::text::regex_internal {
absl::Status Parser::ErrorAt(std::string_view what, size_t at) const {
  return absl::InvalidArgumentError(
      loom::StrCat("regex: ", what, " at byte offset ", at, " of the pattern"));
}

char32_t Parser::NextCodePoint() {
  size_t len = 0;
  const char32_t cp = DecodeUtf8(p_, pos_, &len);
  pos_ += len;
  return cp;
}

void Parser::SkipExtended(const Options& opts) {
  if (!opts.extended) return;
  while (!AtEnd()) {
    const char c = Peek();
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      ++pos_;
    } else if (c == '#') {
      while (!AtEnd() && Peek() != '\n') ++pos_;
    } else {
      break;
    }
  }
}

absl::StatusOr<NodePtr> Parser::ParseAlternation(Options opts, int depth) {
  if (depth > kMaxNestingDepth) return Error("groups nested too deeply");
  std::vector<NodePtr> branches;
  while (true) {
    LOOM_ASSIGN_OR_RETURN(NodePtr branch, ParseConcat(opts, depth));
    branches.push_back(std::move(branch));
    if (!Consume('|')) break;
  }
  if (branches.size() == 1) return std::move(branches[0]);
  NodePtr alt = MakeNode(NodeKind::kAlternate);
  alt->children = std::move(branches);
  return alt;
}

// Parses up to '|', ')' or the end. A bare option group "(?i)" applies to the rest of the
// enclosing group, alternatives included (Oniguruma: "a(?i)b|c" is "a(?i:b|c)").
absl::StatusOr<NodePtr> Parser::ParseConcat(Options opts, int depth) {
  NodePtr concat = MakeNode(NodeKind::kConcat);
  auto& items = concat->children;
  while (true) {
    SkipExtended(opts);
    if (AtEnd() || Peek() == '|' || Peek() == ')') break;
    bool rest_of_group = false;
    LOOM_ASSIGN_OR_RETURN(NodePtr atom, ParseAtom(&opts, depth, &rest_of_group));
    if (rest_of_group) {
      LOOM_ASSIGN_OR_RETURN(NodePtr rest, ParseAlternation(opts, depth + 1));
      items.push_back(std::move(rest));
      break;
    }
    LOOM_RETURN_IF_ERROR(ParseQuantifiers(opts, depth, &atom));
    if (atom->kind == NodeKind::kEmpty) continue;
    if (atom->kind == NodeKind::kLiteral && !atom->folded_literal && !items.empty() &&
        items.back()->kind == NodeKind::kLiteral && !items.back()->folded_literal) {
      items.back()->text.insert(items.back()->text.end(), atom->text.begin(), atom->text.end());
      continue;
    }
    items.push_back(std::move(atom));
  }
  if (!opts.in_lookbehind) ExpandMultiCharFolds(&items);  // Oniguruma does not fold there
  if (items.empty()) return MakeNode(NodeKind::kEmpty);
  if (items.size() == 1) return std::move(items[0]);
  return concat;
}

// Oniguruma's (?i) also folds to and from multi-character foldings: "ß" matches "ss" and "SS",
// and "ss" matches "ß" and "ẞ". Each run of (?i) literals is rebuilt with those alternatives.
void Parser::ExpandMultiCharFolds(std::vector<NodePtr>* items) {
  std::vector<NodePtr> out;
  for (size_t i = 0; i < items->size();) {
    if (!(*items)[i]->folded_literal) {
      out.push_back(std::move((*items)[i++]));
      continue;
    }
    std::vector<char32_t> run;
    const size_t begin = i;
    for (; i < items->size() && (*items)[i]->folded_literal; ++i) {
      run.push_back((*items)[i]->text[0]);
    }
    bool any = false;
    for (size_t k = 0; k < run.size() && !any; ++k) {
      std::u32string joined = FullCaseFold(run[k]);
      any = joined.size() > 1;
      for (size_t len = 2; len <= 3 && k + len <= run.size() && !any; ++len) {
        joined += FullCaseFold(run[k + len - 1]);
        any = !CodePointsFoldingTo(joined).empty();
      }
    }
    if (!any) {
      for (size_t k = begin; k < i; ++k) out.push_back(std::move((*items)[k]));
      continue;
    }
    // A few alternatives per chunk of a run at most: each one doubles the nodes after it.
    // (A multi-character folding across a chunk boundary of a very long run is missed.)
    constexpr size_t kChunk = 64;
    for (size_t c = 0; c < run.size(); c += kChunk) {
      const std::vector<char32_t> chunk(run.begin() + c,
                                        run.begin() + std::min(run.size(), c + kChunk));
      out.push_back(FoldRun(chunk, 0, /*options_left=*/4));
    }
  }
  *items = std::move(out);
}

// One (?i) code point: its case-fold class, or when its full folding is several code points,
// (?:[that class and the code points with the same folding]|[f1][f2]...).
NodePtr Parser::FoldedChar(char32_t cp) {
  const std::u32string fold = FullCaseFold(cp);
  CodePointSet single;
  single.Add(cp);
  single.CloseOverCaseFolding();
  if (fold.size() > 1) single.AddSet(CodePointsFoldingTo(fold));
  NodePtr one = MakeNode(NodeKind::kClass);
  one->class_id = AddClass(std::move(single));
  if (fold.size() == 1) return one;
  NodePtr alt = MakeNode(NodeKind::kAlternate);
  alt->children.push_back(std::move(one));
  alt->children.push_back(FoldSequence(fold));
  return alt;
}

// The code points of `fold`, each with its case-fold equivalents.
NodePtr Parser::FoldSequence(std::u32string_view fold) {
  NodePtr seq = MakeNode(NodeKind::kConcat);
  for (const char32_t f : fold) {
    CodePointSet set;
    set.Add(f);
    set.CloseOverCaseFolding();
    NodePtr part = MakeNode(NodeKind::kClass);
    part->class_id = AddClass(std::move(set));
    seq->children.push_back(std::move(part));
  }
  return seq;
}

// cps[begin..] as a sequence of FoldedChar, except that where two or three code points fold
// together to the folding of one code point ("ss" -> U+00DF), that code point is an alternative.
NodePtr Parser::FoldRun(const std::vector<char32_t>& cps, size_t begin, int options_left) {
  NodePtr concat = MakeNode(NodeKind::kConcat);
  for (size_t i = begin; i < cps.size(); ++i) {
    for (size_t len = 3; len >= 2 && options_left > 0; --len) {
      if (i + len > cps.size()) continue;
      std::u32string joined;
      for (size_t k = i; k < i + len; ++k) joined += FullCaseFold(cps[k]);
      CodePointSet set = CodePointsFoldingTo(joined);
      if (set.empty()) continue;
      NodePtr chars = MakeNode(NodeKind::kConcat);
      chars->children.push_back(FoldedChar(cps[i]));
      chars->children.push_back(FoldRun(cps, i + 1, options_left - 1));
      NodePtr single = MakeNode(NodeKind::kConcat);
      NodePtr cls = MakeNode(NodeKind::kClass);
      cls->class_id = AddClass(std::move(set));
      single->children.push_back(std::move(cls));
      single->children.push_back(FoldRun(cps, i + len, options_left - 1));
      NodePtr alt = MakeNode(NodeKind::kAlternate);
      alt->children.push_back(std::move(chars));
      alt->children.push_back(std::move(single));
      concat->children.push_back(std::move(alt));
      return concat;
    }
    concat->children.push_back(FoldedChar(cps[i]));
  }
  return concat;
}

NodePtr Parser::LiteralNode(char32_t cp, const Options& opts) {
  if (opts.ignore_case && !opts.in_lookbehind && FullCaseFold(cp).size() > 1) {
    // Already the multi-character alternative, for when a quantifier follows.
    NodePtr node = FoldedChar(cp);
    node->text.push_back(cp);
    node->folded_literal = true;
    return node;
  }
  if (opts.ignore_case) {
    CodePointSet set;
    set.Add(cp);
    set.CloseOverCaseFolding();
    if (set.ranges().size() > 1 || set.ranges()[0].first != set.ranges()[0].second) {
      NodePtr node = MakeNode(NodeKind::kClass);
      node->class_id = AddClass(std::move(set));
      node->text.push_back(cp);
      node->folded_literal = true;
      return node;
    }
  }
  NodePtr node = MakeNode(NodeKind::kLiteral);
  node->text.push_back(cp);
  node->folded_literal = opts.ignore_case;
  return node;
}

absl::StatusOr<NodePtr> Parser::ParseAtom(Options* opts, int depth, bool* rest_of_group) {
  const size_t start = pos_;
  const char c = Peek();
  switch (c) {
    case '(':
      ++pos_;
      return ParseGroup(opts, depth + 1, rest_of_group);
    case '[': {
      ++pos_;
      const bool negated = Peek() == '^';
      NodePtr node = MakeNode(NodeKind::kClass);
      LOOM_ASSIGN_OR_RETURN(CodePointSet set, ParseClass(*opts, depth + 1, /*top_level=*/true));
      // Under (?i) a (non-negated) class also matches the multi-character foldings of its
      // members, after the single code point: "(?i)[ß]" is (?:[ßẞ]|[sSſ][sSſ]).
      std::vector<std::u32string> folds;
      if (opts->ignore_case && !negated && !opts->in_lookbehind) folds = MultiCharFoldsOf(set);
      node->class_id = AddClass(std::move(set));
      if (folds.empty()) return node;
      NodePtr alt = MakeNode(NodeKind::kAlternate);
      alt->children.push_back(std::move(node));
      for (const std::u32string& fold : folds) alt->children.push_back(FoldSequence(fold));
      return alt;
    }
    case '.': {
      ++pos_;
      NodePtr node = MakeNode(NodeKind::kAnyChar);
      node->dot_all = opts->dot_all;
      return node;
    }
    case '^':
    case '$': {
      ++pos_;
      NodePtr node = MakeNode(NodeKind::kAssert);
      node->assert_kind = c == '^' ? AssertKind::kLineBegin : AssertKind::kLineEnd;
      return node;
    }
    case '*':
    case '+':
    case '?':
      return Error("quantifier without a target");
    case '{': {
      int min = 0, max = 0;
      absl::Status error;
      if (ParseInterval(&min, &max, &error)) return ErrorAt("quantifier without a target", start);
      ++pos_;
      return LiteralNode('{', *opts);
    }
    case '\\': {
      ++pos_;
      LOOM_ASSIGN_OR_RETURN(Escape esc, ParseEscape(/*in_class=*/false));
      if (esc.kind == Escape::Kind::kChar) return LiteralNode(esc.cp, *opts);
      if (esc.kind == Escape::Kind::kAssert) {
        if (opts->in_lookbehind && (esc.assert_kind == AssertKind::kTextEnd ||
                                    esc.assert_kind == AssertKind::kTextEndNl)) {
          return ErrorAt("end-of-text anchor inside a lookbehind", start);
        }
        NodePtr node = MakeNode(NodeKind::kAssert);
        node->assert_kind = esc.assert_kind;
        return node;
      }
      NodePtr node = MakeNode(NodeKind::kClass);
      node->class_id = AddClass(std::move(esc.set));
      return node;
    }
    default:
      return LiteralNode(NextCodePoint(), *opts);
  }
}

absl::StatusOr<NodePtr> Parser::ParseGroup(Options* opts, int depth, bool* rest_of_group) {
  if (depth > kMaxNestingDepth) return Error("groups nested too deeply");
  const size_t open = pos_ - 1;
  NodeKind kind = NodeKind::kConcat;  // a plain group: just its body
  bool enclosed = true;  // a capturing or option group
  bool behind = false, negate = false;
  Options inner = *opts;
  if (Consume('?')) {
    enclosed = false;
    const char c = Peek();
    if (c == ':') {
      ++pos_;
    } else if (c == '=' || c == '!') {
      if (opts->in_lookbehind) return ErrorAt("lookahead inside a lookbehind", open);
      ++pos_;
      kind = NodeKind::kLook;
      negate = c == '!';
    } else if (c == '<' && (Peek(1) == '=' || Peek(1) == '!')) {
      negate = Peek(1) == '!';
      if (negate && opts->in_positive_lookbehind) {
        return ErrorAt("negative lookbehind inside a lookbehind", open);
      }
      pos_ += 2;
      kind = NodeKind::kLook;
      behind = true;
      inner.in_lookbehind = true;
      inner.in_positive_lookbehind = inner.in_positive_lookbehind || !negate;
    } else if (c == '>') {
      ++pos_;
      kind = NodeKind::kAtomic;
    } else if (c == '<' || c == '\'') {
      const char close = c == '<' ? '>' : '\'';
      enclosed = true;
      ++pos_;
      const size_t name_start = pos_;
      while (!AtEnd() && Peek() != close) ++pos_;
      if (AtEnd() || pos_ == name_start) return ErrorAt("invalid group name", name_start);
      ++pos_;
    } else if (c == '#') {
      while (!AtEnd() && Peek() != ')') ++pos_;
      if (!Consume(')')) return ErrorAt("unterminated comment", open);
      return MakeNode(NodeKind::kEmpty);
    } else {
      bool on = true;
      while (true) {
        const char o = Peek();
        if (o == '-' && on) { on = false; ++pos_; continue; }
        if (o == 'i') inner.ignore_case = on;
        else if (o == 'm') inner.dot_all = on;
        else if (o == 'x') inner.extended = on;
        else break;
        ++pos_;
      }
      if (Consume(')')) {
        *opts = inner;
        *rest_of_group = true;
        return MakeNode(NodeKind::kEmpty);
      }
      if (!Consume(':')) return Error("unsupported group syntax");
      enclosed = true;
    }
  }
  LOOM_ASSIGN_OR_RETURN(NodePtr body, ParseAlternation(inner, depth + 1));
  if (!Consume(')')) return ErrorAt("missing ')'", open);
  if (kind == NodeKind::kConcat) {
    body->enclosed = enclosed;
    return body;
  }
  NodePtr node = MakeNode(kind);
  node->behind = behind;
  node->negate = negate;
  node->children.push_back(std::move(body));
  return node;
}

// Parses {n}, {n,}, {,m} or {n,m} at pos_ (on '{'); leaves pos_ alone and returns false when the
// text is not an interval (then '{' is a literal). *error is set for out-of-range counts.
bool Parser::ParseInterval(int* min, int* max, absl::Status* error) {
  size_t i = pos_ + 1;
  auto number = [&](int* value) {
    const size_t begin = i;
    long long v = 0;
    while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
      v = std::min<long long>(v * 10 + (p_[i] - '0'), kMaxRepeatCount + 1LL);
      ++i;
    }
    *value = static_cast<int>(v);
    return i > begin;
  };
  const bool has_min = number(min);
  if (!has_min) *min = 0;
  if (i < p_.size() && p_[i] == ',') {
    ++i;
    if (!number(max)) *max = kInfinite;
    if (!has_min && *max == kInfinite) return false;  // "{,}" is literal text
  } else {
    if (!has_min) return false;
    *max = *min;
  }
  if (i >= p_.size() || p_[i] != '}') return false;
  if (*min > kMaxRepeatCount || *max > kMaxRepeatCount) {
    *error = Error("repeat count too large");
  } else if (*max != kInfinite && *max < *min) {
    *error = Error("repeat range out of order");
  }
  pos_ = i + 1;
  return true;
}

// Oniguruma refuses to repeat an anchor or lookaround, also as a branch of a non-capturing
// alternation ("(?:a|$)*"), but accepts one inside a capturing or option group.
bool IsRepeatable(const Node& node) {
  auto zero_width = [](const Node& n) {
    return !n.enclosed && (n.kind == NodeKind::kAssert || n.kind == NodeKind::kLook);
  };
  if (zero_width(node)) return false;
  if (node.kind == NodeKind::kAlternate && !node.enclosed) {
    for (const auto& branch : node.children) {
      if (zero_width(*branch)) return false;
    }
  }
  return true;
}

absl::Status Parser::ParseQuantifiers(const Options& opts, int depth, NodePtr* node) {
  while (true) {
    SkipExtended(opts);
    const size_t start = pos_;
    const char c = Peek();
    int min = 0, max = 0;
    bool interval = false;
    if (AtEnd()) return absl::OkStatus();
    if (c == '*') { min = 0; max = kInfinite; ++pos_; }
    else if (c == '+') { min = 1; max = kInfinite; ++pos_; }
    else if (c == '?') { min = 0; max = 1; ++pos_; }
    else if (c == '{') {
      absl::Status error;
      if (!ParseInterval(&min, &max, &error)) return absl::OkStatus();
      LOOM_RETURN_IF_ERROR(error);
      interval = true;
    } else {
      return absl::OkStatus();
    }
    if (!IsRepeatable(**node)) return ErrorAt("quantifier on an anchor or lookaround", start);
    if (++depth > kMaxNestingDepth) return ErrorAt("quantifiers nested too deeply", start);
    // Ruby syntax: "x{n}?" is (?:x{n})? (the '?' is the next quantifier), "x{n,m}?" is lazy,
    // and '+' after an interval is the next quantifier, not possessive.
    Greed greed = Greed::kGreedy;
    if (!(interval && min == max) && Consume('?')) greed = Greed::kLazy;
    else if (!interval && Consume('+')) greed = Greed::kPossessive;
    NodePtr repeat = MakeNode(NodeKind::kRepeat);
    repeat->min = min;
    repeat->max = max;
    repeat->greed = greed;
    repeat->children.push_back(std::move(*node));
    *node = std::move(repeat);
  }
}

absl::StatusOr<ParsedPattern> ParsePattern(std::string_view pattern) {
  Parser parser(pattern);
  return parser.Parse();
}

}  // namespace loom::text::regex_internal
