// Internal to server/text/jinja: the recursive-descent parser behind ParseTemplate, split over
// parser.cc (statements) and parser_expr.cc (expressions). Not thread-safe; one per parse.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "engine/common/strings.h"
#include "server/text/jinja/ast.h"
#include "server/text/jinja/lexer.h"
#include "server/text/jinja/parser.h"

namespace loom::text::jinja::parser_internal {

// Recursive descent over the token list. The first error is kept in error_ and every parse
// function returns null (or false) from then on.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<Body> Run() {
    Body body = ParseBody({});
    if (!error_.ok()) return error_;
    if (Cur().kind != TokenKind::kEnd) {
      Fail(Cur(), StrCat("unexpected '", Cur().text, "'"));
      return error_;
    }
    return body;
  }

 private:
  // Limits recursion depth; constructed on entry to every recursive parse function.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxParseDepth) p_->Fail(p_->Cur(), "template nested too deeply");
    }
    ~DepthGuard() { --p_->depth_; }

   private:
    Parser* p_;
  };

  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  void Advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool ok() const { return error_.ok(); }
  // Bounds left-deep chains (a + b + c ..., a.b.c ..., x|f|g ...), whose tree depth grows with
  // the chain length although the parser iterates over them.
  bool ChainOk(int* links) {
    if (++*links + depth_ > kMaxParseDepth) Fail(Cur(), "expression too long or nested too deeply");
    return ok();
  }

  void Fail(const Token& at, std::string_view message) {
    if (!error_.ok()) return;
    error_ = absl::InvalidArgumentError(
        StrCat("template syntax error at line ", at.line, ", column ", at.column, ": ", message));
  }

  bool IsOp(std::string_view op) const { return Cur().kind == TokenKind::kOperator && Cur().text == op; }
  bool IsName(std::string_view name) const { return Cur().kind == TokenKind::kName && Cur().text == name; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Advance();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Advance();
    return true;
  }
  bool ExpectOp(std::string_view op) {
    if (SkipOp(op)) return true;
    Fail(Cur(), StrCat("expected '", op, "'", Describe()));
    return false;
  }
  std::string Describe() const {
    switch (Cur().kind) {
      case TokenKind::kEnd: return ", got end of template";
      case TokenKind::kBlockEnd: return ", got end of statement block";
      case TokenKind::kVarEnd: return ", got end of print statement";
      default: return StrCat(", got '", Cur().text, "'");
    }
  }
  bool ExpectBlockEnd() {
    if (Cur().kind == TokenKind::kBlockEnd) {
      Advance();
      return true;
    }
    Fail(Cur(), StrCat("expected end of statement block", Describe()));
    return false;
  }
  std::string ExpectIdentifier() {
    if (Cur().kind != TokenKind::kName) {
      Fail(Cur(), StrCat("expected a name", Describe()));
      return "";
    }
    std::string name = Cur().text;
    Advance();
    return name;
  }

  ExprPtr NewExpr(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  // A postfix node (attribute, item, call, filter, test) reports errors at its operand's start.
  static void StartAt(Expr& node, const Expr* operand) {
    if (operand == nullptr) return;
    node.line = operand->line;
    node.column = operand->column;
  }

  // ---- statements (parser.cc) ----

  // Parses until end of input or a block whose first name is in `ends` (left unconsumed, the
  // stream positioned at that name).
  Body ParseBody(std::initializer_list<std::string_view> ends);
  StmtPtr ParseStatement();
  // Parses a body that ends with `{% end %}` and consumes the end tag.
  bool ParseEnd(std::string_view end, Body* body);
  bool ParseIf(Stmt& s);
  // Assignment target: name, or names separated by commas, optionally in parentheses.
  bool ParseTargets(std::vector<std::string>* targets);
  bool ParseFor(Stmt& s);
  bool ParseSet(Stmt& s);
  // `(a, b=default, ...)` parameter list of a macro or call block.
  bool ParseParams(Stmt& s);
  bool ParseMacro(Stmt& s);
  bool ParseCallBlock(Stmt& s);
  bool ParseFilterBlock(Stmt& s);
  bool ParseWith(Stmt& s);

  // ---- expressions (parser_expr.cc) ----

  // Expression, or a tuple when commas follow (`a, b`). In a for iterable, `if` is not a
  // conditional expression but the loop filter, and `recursive` ends the expression.
  ExprPtr ParseTuple(bool with_condexpr, bool for_iter = false);
  ExprPtr ParseExpression(bool with_condexpr);
  ExprPtr MakeBinary(const Token& at, std::string op, ExprPtr left, ExprPtr right);
  ExprPtr ParseOr();
  ExprPtr ParseAnd();
  ExprPtr ParseNot();
  ExprPtr ParseCompare();
  ExprPtr ParseMath1();
  ExprPtr ParseConcat();
  ExprPtr ParseMath2();
  ExprPtr ParsePow();
  ExprPtr ParseUnary(bool with_filter);
  ExprPtr ParsePrimary();
  ExprPtr ParseParenthesized();
  ExprPtr ParseList();
  ExprPtr ParseDict();
  ExprPtr ParsePostfix(ExprPtr node);
  ExprPtr ParseSubscript(const Token& at, ExprPtr target);
  // Parses `(args, name=value)` into node->children (after any already there) and kwargs.
  bool ParseArgs(Expr& node);
  ExprPtr ParseCall(ExprPtr callee);
  // `| name(args) | name2 ...` applied to `operand` (null inside filter blocks).
  ExprPtr ParseFilterChain(ExprPtr operand, bool leading_bar = true);
  ExprPtr ParseFilterExpr(ExprPtr node);
  ExprPtr ParseTest(ExprPtr operand);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // enclosing for-loop bodies, for break/continue
  absl::Status error_;
};

}  // namespace loom::text::jinja::parser_internal
