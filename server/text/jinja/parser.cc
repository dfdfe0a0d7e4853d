#include "server/text/jinja/parser.h"

#include <utility>

#include "engine/common/status.h"
#include "server/text/jinja/interpreter.h"
#include "server/text/jinja/parser_internal.h"

namespace loom::text::jinja {
namespace parser_internal {

// Parses until end of input or a block whose first name is in `ends` (left unconsumed, the
// stream positioned at that name).
Body Parser::ParseBody(std::initializer_list<std::string_view> ends) {
  DepthGuard guard(this);
  Body body;
  while (ok()) {
    const Token& t = Cur();
    if (t.kind == TokenKind::kEnd) {
      if (ends.size() > 0) Fail(t, StrCat("unexpected end of template, expected '", *ends.begin(), "'"));
      return body;
    }
    if (t.kind == TokenKind::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kText;
      s->text = t.text;
      body.push_back(std::move(s));
      Advance();
    } else if (t.kind == TokenKind::kVarBegin) {
      Advance();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kOutput;
      s->line = t.line;
      s->column = t.column;
      s->expr = ParseTuple(true);
      if (!ok()) return body;
      if (Cur().kind != TokenKind::kVarEnd) {
        Fail(Cur(), StrCat("expected end of print statement", Describe()));
        return body;
      }
      Advance();
      body.push_back(std::move(s));
    } else if (t.kind == TokenKind::kBlockBegin) {
      const Token& name = Peek();
      for (std::string_view end : ends) {
        if (name.kind == TokenKind::kName && name.text == end) {
          Advance();
          return body;
        }
      }
      Advance();
      StmtPtr s = ParseStatement();
      if (s) body.push_back(std::move(s));
    } else {
      Fail(t, "unexpected token");
    }
  }
  return body;
}

StmtPtr Parser::ParseStatement() {
  const Token& t = Cur();
  if (t.kind != TokenKind::kName) {
    Fail(t, "tag name expected");
    return nullptr;
  }
  auto s = std::make_unique<Stmt>();
  s->line = t.line;
  s->column = t.column;
  const std::string keyword = t.text;
  Advance();
  bool done = false;
  if (keyword == "if") {
    done = ParseIf(*s);
  } else if (keyword == "for") {
    done = ParseFor(*s);
  } else if (keyword == "set") {
    done = ParseSet(*s);
  } else if (keyword == "macro") {
    done = ParseMacro(*s);
  } else if (keyword == "call") {
    done = ParseCallBlock(*s);
  } else if (keyword == "filter") {
    done = ParseFilterBlock(*s);
  } else if (keyword == "with") {
    done = ParseWith(*s);
  } else if (keyword == "generation") {
    s->kind = StmtKind::kScope;
    done = ExpectBlockEnd() && ParseEnd("endgeneration", &s->body);
  } else if (keyword == "break" || keyword == "continue") {
    s->kind = keyword == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    if (loop_depth_ == 0) {
      Fail(t, StrCat("'", keyword, "' not properly in loop"));
      return nullptr;
    }
    done = ExpectBlockEnd();
  } else {
    Fail(t, StrCat("Encountered unknown tag '", keyword, "'"));
  }
  if (!done || !ok()) return nullptr;
  return s;
}

// Parses a body that ends with `{% end %}` and consumes the end tag.
bool Parser::ParseEnd(std::string_view end, Body* body) {
  *body = ParseBody({end});
  if (!ok()) return false;
  Advance();  // the end name
  return ExpectBlockEnd();
}

bool Parser::ParseIf(Stmt& s) {
  s.kind = StmtKind::kIf;
  while (ok()) {
    ExprPtr cond = ParseTuple(false);
    if (!ok() || !ExpectBlockEnd()) return false;
    Body body = ParseBody({"elif", "else", "endif"});
    if (!ok()) return false;
    s.branches.emplace_back(std::move(cond), std::move(body));
    const std::string which = Cur().text;
    Advance();
    if (which == "elif") continue;
    if (which == "else") {
      if (!ExpectBlockEnd()) return false;
      return ParseEnd("endif", &s.else_body);
    }
    return ExpectBlockEnd();
  }
  return false;
}

// Assignment target: name, or names separated by commas, optionally in parentheses.
bool Parser::ParseTargets(std::vector<std::string>* targets) {
  const bool paren = SkipOp("(");
  do {
    std::string name = ExpectIdentifier();
    if (!ok()) return false;
    targets->push_back(std::move(name));
  } while (SkipOp(","));
  return !paren || ExpectOp(")");
}

bool Parser::ParseFor(Stmt& s) {
  s.kind = StmtKind::kFor;
  if (!ParseTargets(&s.targets)) return false;
  if (!SkipName("in")) {
    Fail(Cur(), StrCat("expected 'in'", Describe()));
    return false;
  }
  s.expr = ParseTuple(false, /*for_iter=*/true);
  if (!ok()) return false;
  if (SkipName("if")) {
    s.filter = ParseExpression(true);
    if (!ok()) return false;
  }
  s.recursive = SkipName("recursive");
  if (!ExpectBlockEnd()) return false;
  ++loop_depth_;
  s.body = ParseBody({"else", "endfor"});
  --loop_depth_;
  if (!ok()) return false;
  const bool has_else = IsName("else");
  Advance();
  if (!ExpectBlockEnd()) return false;
  if (has_else) return ParseEnd("endfor", &s.else_body);
  return true;
}

bool Parser::ParseSet(Stmt& s) {
  s.kind = StmtKind::kSet;
  std::string first = ExpectIdentifier();
  if (!ok()) return false;
  s.targets.push_back(first);
  if (SkipOp(".")) {
    s.attr = ExpectIdentifier();
    if (!ok()) return false;
  } else {
    while (SkipOp(",")) {
      s.targets.push_back(ExpectIdentifier());
      if (!ok()) return false;
    }
  }
  if (SkipOp("=")) {
    s.expr = ParseTuple(true);
    return ok() && ExpectBlockEnd();
  }
  if (s.targets.size() != 1 || !s.attr.empty()) {
    Fail(Cur(), StrCat("expected '='", Describe()));
    return false;
  }
  s.kind = StmtKind::kSetBlock;
  if (IsOp("|")) {
    s.filter = ParseFilterChain(nullptr);
    if (!ok()) return false;
  }
  return ExpectBlockEnd() && ParseEnd("endset", &s.body);
}

// `(a, b=default, ...)` parameter list of a macro or call block.
bool Parser::ParseParams(Stmt& s) {
  if (!ExpectOp("(")) return false;
  while (ok() && !IsOp(")")) {
    if (!s.params.empty() && !ExpectOp(",")) return false;
    if (IsOp(")")) break;
    s.params.push_back(ExpectIdentifier());
    if (!ok()) return false;
    if (SkipOp("=")) {
      s.defaults.push_back(ParseExpression(true));
    } else {
      s.defaults.push_back(nullptr);
    }
  }
  return ok() && ExpectOp(")");
}

bool Parser::ParseMacro(Stmt& s) {
  s.kind = StmtKind::kMacro;
  s.name = ExpectIdentifier();
  if (!ok() || !ParseParams(s)) return false;
  // A macro body is not inside the loop around its definition.
  const int saved_loop_depth = std::exchange(loop_depth_, 0);
  const bool done = ExpectBlockEnd() && ParseEnd("endmacro", &s.body);
  loop_depth_ = saved_loop_depth;
  return done;
}

bool Parser::ParseCallBlock(Stmt& s) {
  s.kind = StmtKind::kCallBlock;
  if (IsOp("(") && !ParseParams(s)) return false;
  s.expr = ParseExpression(true);
  if (!ok()) return false;
  if (s.expr->kind != ExprKind::kCall) {
    Fail(Cur(), "expected call");
    return false;
  }
  return ExpectBlockEnd() && ParseEnd("endcall", &s.body);
}

bool Parser::ParseFilterBlock(Stmt& s) {
  s.kind = StmtKind::kFilterBlock;
  s.filter = ParseFilterChain(nullptr, /*leading_bar=*/false);
  return ok() && ExpectBlockEnd() && ParseEnd("endfilter", &s.body);
}

bool Parser::ParseWith(Stmt& s) {
  s.kind = StmtKind::kScope;
  while (ok() && Cur().kind != TokenKind::kBlockEnd) {
    if (!s.targets.empty() && !ExpectOp(",")) return false;
    s.targets.push_back(ExpectIdentifier());
    if (!ok() || !ExpectOp("=")) return false;
    s.values.push_back(ParseExpression(true));
  }
  return ok() && ExpectBlockEnd() && ParseEnd("endwith", &s.body);
}
}  // namespace parser_internal

namespace {

// jinja2's compiler refuses unknown filter and test names, except in a "soft" frame (inside an
// if statement or a conditional expression, where they fail only when evaluated). Loop, macro
// and block bodies open a fresh, non-soft frame.
absl::Status CheckExprNames(const Expr* e, bool soft) {
  if (e == nullptr) return absl::OkStatus();
  if (e->kind == ExprKind::kCondExpr) soft = true;
  if (!soft && ((e->kind == ExprKind::kFilter && !IsKnownFilter(e->name)) ||
                (e->kind == ExprKind::kTest && !IsKnownTest(e->name)))) {
    return absl::InvalidArgumentError(
        StrCat("template syntax error at line ", e->line, ", column ", e->column, ": No ",
               e->kind == ExprKind::kFilter ? "filter" : "test", " named '", e->name, "'."));
  }
  for (const ExprPtr& child : e->children) LOOM_RETURN_IF_ERROR(CheckExprNames(child.get(), soft));
  for (const auto& [key, value] : e->kwargs) LOOM_RETURN_IF_ERROR(CheckExprNames(value.get(), soft));
  return absl::OkStatus();
}

absl::Status CheckNames(const Body& body, bool soft) {
  for (const StmtPtr& s : body) {
    switch (s->kind) {
      case StmtKind::kIf:
        for (const auto& [cond, branch] : s->branches) {
          LOOM_RETURN_IF_ERROR(CheckExprNames(cond.get(), true));
          LOOM_RETURN_IF_ERROR(CheckNames(branch, true));
        }
        LOOM_RETURN_IF_ERROR(CheckNames(s->else_body, true));
        break;
      case StmtKind::kFor:
        LOOM_RETURN_IF_ERROR(CheckExprNames(s->expr.get(), soft));
        LOOM_RETURN_IF_ERROR(CheckExprNames(s->filter.get(), false));
        LOOM_RETURN_IF_ERROR(CheckNames(s->body, false));
        LOOM_RETURN_IF_ERROR(CheckNames(s->else_body, soft));
        break;
      case StmtKind::kMacro:
      case StmtKind::kCallBlock:
        for (const ExprPtr& d : s->defaults) LOOM_RETURN_IF_ERROR(CheckExprNames(d.get(), false));
        LOOM_RETURN_IF_ERROR(CheckExprNames(s->expr.get(), soft));
        LOOM_RETURN_IF_ERROR(CheckNames(s->body, false));
        break;
      default:
        LOOM_RETURN_IF_ERROR(CheckExprNames(s->expr.get(), soft));
        LOOM_RETURN_IF_ERROR(CheckExprNames(s->filter.get(), s->kind == StmtKind::kSet && soft));
        for (const ExprPtr& v : s->values) LOOM_RETURN_IF_ERROR(CheckExprNames(v.get(), soft));
        LOOM_RETURN_IF_ERROR(CheckNames(s->body, false));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Body> ParseTemplate(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  LOOM_ASSIGN_OR_RETURN(Body body, parser_internal::Parser(std::move(*tokens)).Run());
  LOOM_RETURN_IF_ERROR(CheckNames(body, false));
  return body;
}

}  // namespace loom::text::jinja
