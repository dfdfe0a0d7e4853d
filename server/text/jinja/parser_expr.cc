// Expression grammar of the parser, with jinja2's precedence (lowest first): conditional
// expression, or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary - +, then postfix
// access, calls, filters and tests.

#include "server/text/jinja/parser_internal.h"

namespace loom::text::jinja::parser_internal {

// Expression, or a tuple when commas follow (`a, b`). In a for iterable, `if` is not a
// conditional expression but the loop filter, and `recursive` ends the expression.
ExprPtr Parser::ParseTuple(bool with_condexpr, bool for_iter) {
  const Token& start = Cur();
  ExprPtr first = ParseExpression(with_condexpr);
  if (!ok() || !IsOp(",")) return first;
  ExprPtr tuple = NewExpr(ExprKind::kTuple, start);
  tuple->children.push_back(std::move(first));
  while (SkipOp(",")) {
    if (Cur().kind == TokenKind::kBlockEnd || Cur().kind == TokenKind::kVarEnd ||
        (for_iter && (IsName("if") || IsName("recursive")))) {
      break;
    }
    tuple->children.push_back(ParseExpression(with_condexpr));
    if (!ok()) return nullptr;
  }
  return tuple;
}

ExprPtr Parser::ParseExpression(bool with_condexpr) {
  DepthGuard guard(this);
  if (!ok()) return nullptr;
  const Token& start = Cur();
  ExprPtr expr = ParseOr();
  if (!with_condexpr) return expr;
  int links = 0;
  while (ok() && ChainOk(&links) && SkipName("if")) {
    ExprPtr cond = ParseOr();
    ExprPtr other;
    if (SkipName("else")) other = ParseExpression(true);
    if (!ok()) return nullptr;
    ExprPtr node = NewExpr(ExprKind::kCondExpr, start);
    node->children.push_back(std::move(cond));
    node->children.push_back(std::move(expr));
    node->children.push_back(std::move(other));
    expr = std::move(node);
  }
  return ok() ? std::move(expr) : nullptr;
}

ExprPtr Parser::MakeBinary(const Token& at, std::string op, ExprPtr left, ExprPtr right) {
  if (!ok()) return nullptr;
  ExprPtr node = NewExpr(ExprKind::kBinary, at);
  node->name = std::move(op);
  node->children.push_back(std::move(left));
  node->children.push_back(std::move(right));
  return node;
}

ExprPtr Parser::ParseOr() {
  ExprPtr left = ParseAnd();
  int links = 0;
  while (ok() && IsName("or") && ChainOk(&links)) {
    const Token& at = Cur();
    Advance();
    left = MakeBinary(at, "or", std::move(left), ParseAnd());
  }
  return left;
}

ExprPtr Parser::ParseAnd() {
  ExprPtr left = ParseNot();
  int links = 0;
  while (ok() && IsName("and") && ChainOk(&links)) {
    const Token& at = Cur();
    Advance();
    left = MakeBinary(at, "and", std::move(left), ParseNot());
  }
  return left;
}

ExprPtr Parser::ParseNot() {
  if (IsName("not")) {
    DepthGuard guard(this);
    if (!ok()) return nullptr;
    ExprPtr node = NewExpr(ExprKind::kUnary, Cur());
    Advance();
    node->name = "not";
    node->children.push_back(ParseNot());
    return ok() ? std::move(node) : nullptr;
  }
  return ParseCompare();
}

ExprPtr Parser::ParseCompare() {
  const Token& start = Cur();
  ExprPtr first = ParseMath1();
  if (!ok()) return nullptr;
  ExprPtr node;
  while (ok()) {
    std::string op;
    if (Cur().kind == TokenKind::kOperator &&
        (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
         Cur().text == ">" || Cur().text == ">=")) {
      op = Cur().text;
      Advance();
    } else if (IsName("in")) {
      op = "in";
      Advance();
    } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().text == "in") {
      op = "notin";
      Advance();
      Advance();
    } else {
      break;
    }
    if (!node) {
      node = NewExpr(ExprKind::kCompare, start);
      node->children.push_back(std::move(first));
    }
    node->ops.push_back(op);
    node->children.push_back(ParseMath1());
  }
  if (!ok()) return nullptr;
  return node ? std::move(node) : std::move(first);
}

ExprPtr Parser::ParseMath1() {
  ExprPtr left = ParseConcat();
  int links = 0;
  while (ok() && (IsOp("+") || IsOp("-")) && ChainOk(&links)) {
    const Token& at = Cur();
    std::string op = at.text;
    Advance();
    left = MakeBinary(at, op, std::move(left), ParseConcat());
  }
  return left;
}

ExprPtr Parser::ParseConcat() {
  ExprPtr left = ParseMath2();
  int links = 0;
  while (ok() && IsOp("~") && ChainOk(&links)) {
    const Token& at = Cur();
    Advance();
    left = MakeBinary(at, "~", std::move(left), ParseMath2());
  }
  return left;
}

ExprPtr Parser::ParseMath2() {
  ExprPtr left = ParsePow();
  int links = 0;
  while (ok() && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) && ChainOk(&links)) {
    const Token& at = Cur();
    std::string op = at.text;
    Advance();
    left = MakeBinary(at, op, std::move(left), ParsePow());
  }
  return left;
}

ExprPtr Parser::ParsePow() {
  ExprPtr left = ParseUnary(true);
  int links = 0;
  while (ok() && IsOp("**") && ChainOk(&links)) {
    const Token& at = Cur();
    Advance();
    left = MakeBinary(at, "**", std::move(left), ParseUnary(true));
  }
  return left;
}

ExprPtr Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(this);
  if (!ok()) return nullptr;
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = NewExpr(ExprKind::kUnary, Cur());
    node->name = Cur().text;
    Advance();
    node->children.push_back(ParseUnary(false));
  } else {
    node = ParsePrimary();
    if (ok()) node = ParsePostfix(std::move(node));
  }
  if (!ok()) return nullptr;
  return with_filter ? ParseFilterExpr(std::move(node)) : std::move(node);
}

ExprPtr Parser::ParsePrimary() {
  const Token& t = Cur();
  switch (t.kind) {
    case TokenKind::kName: {
      ExprPtr node = NewExpr(ExprKind::kLiteral, t);
      if (t.text == "true" || t.text == "True") {
        node->literal = Value::Bool(true);
      } else if (t.text == "false" || t.text == "False") {
        node->literal = Value::Bool(false);
      } else if (t.text == "none" || t.text == "None") {
        node->literal = Value::None();
      } else {
        node->kind = ExprKind::kName;
        node->name = t.text;
      }
      Advance();
      return node;
    }
    case TokenKind::kString: {
      ExprPtr node = NewExpr(ExprKind::kLiteral, t);
      std::string text;
      while (Cur().kind == TokenKind::kString) {
        text += Cur().text;
        Advance();
      }
      node->literal = Value::String(std::move(text));
      return node;
    }
    case TokenKind::kInt:
    case TokenKind::kFloat: {
      ExprPtr node = NewExpr(ExprKind::kLiteral, t);
      node->literal = t.kind == TokenKind::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value);
      Advance();
      return node;
    }
    case TokenKind::kOperator:
      if (t.text == "(") return ParseParenthesized();
      if (t.text == "[") return ParseList();
      if (t.text == "{") return ParseDict();
      [[fallthrough]];
    default:
      Fail(t, StrCat("unexpected ", t.kind == TokenKind::kOperator ? StrCat("'", t.text, "'") : Describe().substr(6)));
      return nullptr;
  }
}

ExprPtr Parser::ParseParenthesized() {
  const Token& start = Cur();
  Advance();
  if (SkipOp(")")) return NewExpr(ExprKind::kTuple, start);
  ExprPtr first = ParseExpression(true);
  if (!ok()) return nullptr;
  if (SkipOp(")")) return first;
  ExprPtr tuple = NewExpr(ExprKind::kTuple, start);
  tuple->children.push_back(std::move(first));
  while (ok() && SkipOp(",")) {
    if (IsOp(")")) break;
    tuple->children.push_back(ParseExpression(true));
  }
  if (!ok() || !ExpectOp(")")) return nullptr;
  return tuple;
}

ExprPtr Parser::ParseList() {
  ExprPtr node = NewExpr(ExprKind::kList, Cur());
  Advance();
  while (ok() && !IsOp("]")) {
    if (!node->children.empty() && !ExpectOp(",")) return nullptr;
    if (IsOp("]")) break;
    node->children.push_back(ParseExpression(true));
  }
  if (!ok() || !ExpectOp("]")) return nullptr;
  return node;
}

ExprPtr Parser::ParseDict() {
  ExprPtr node = NewExpr(ExprKind::kDict, Cur());
  Advance();
  while (ok() && !IsOp("}")) {
    if (!node->children.empty() && !ExpectOp(",")) return nullptr;
    if (IsOp("}")) break;
    node->children.push_back(ParseExpression(true));
    if (!ok() || !ExpectOp(":")) return nullptr;
    node->children.push_back(ParseExpression(true));
  }
  if (!ok() || !ExpectOp("}")) return nullptr;
  return node;
}

ExprPtr Parser::ParsePostfix(ExprPtr node) {
  int links = 0;
  while (ok() && (!(IsOp(".") || IsOp("[") || IsOp("(")) || ChainOk(&links))) {
    const Token& at = Cur();
    if (IsOp(".")) {
      Advance();
      if (Cur().kind == TokenKind::kName) {
        ExprPtr attr = NewExpr(ExprKind::kGetAttr, at);
        attr->name = Cur().text;
        StartAt(*attr, node.get());
        attr->children.push_back(std::move(node));
        node = std::move(attr);
        Advance();
      } else if (Cur().kind == TokenKind::kInt) {
        ExprPtr item = NewExpr(ExprKind::kGetItem, at);
        StartAt(*item, node.get());
        item->children.push_back(std::move(node));
        ExprPtr index = NewExpr(ExprKind::kLiteral, Cur());
        index->literal = Value::Int(Cur().int_value);
        item->children.push_back(std::move(index));
        node = std::move(item);
        Advance();
      } else {
        Fail(Cur(), "expected name or number");
        return nullptr;
      }
    } else if (IsOp("[")) {
      Advance();
      node = ParseSubscript(at, std::move(node));
    } else if (IsOp("(")) {
      node = ParseCall(std::move(node));
    } else {
      break;
    }
  }
  return ok() ? std::move(node) : nullptr;
}

ExprPtr Parser::ParseSubscript(const Token& at, ExprPtr target) {
  ExprPtr parts[3];
  int colons = 0;
  if (!IsOp(":")) parts[0] = ParseExpression(true);
  while (ok() && colons < 2 && SkipOp(":")) {
    ++colons;
    if (!IsOp(":") && !IsOp("]")) parts[colons] = ParseExpression(true);
  }
  if (!ok() || !ExpectOp("]")) return nullptr;
  ExprPtr node = NewExpr(colons == 0 ? ExprKind::kGetItem : ExprKind::kSlice, at);
  StartAt(*node, target.get());
  node->children.push_back(std::move(target));
  node->children.push_back(std::move(parts[0]));
  if (colons > 0) {
    node->children.push_back(std::move(parts[1]));
    node->children.push_back(std::move(parts[2]));
  }
  return node;
}

// Parses `(args, name=value)` into node->children (after any already there) and kwargs.
bool Parser::ParseArgs(Expr& node) {
  if (!ExpectOp("(")) return false;
  bool first = true;
  while (ok() && !IsOp(")")) {
    if (!first && !ExpectOp(",")) return false;
    first = false;
    if (IsOp(")")) break;
    if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator && Peek().text == "=") {
      std::string key = Cur().text;
      Advance();
      Advance();
      node.kwargs.emplace_back(std::move(key), ParseExpression(true));
    } else {
      if (!node.kwargs.empty()) {
        Fail(Cur(), "positional argument follows keyword argument");
        return false;
      }
      node.children.push_back(ParseExpression(true));
    }
  }
  return ok() && ExpectOp(")");
}

ExprPtr Parser::ParseCall(ExprPtr callee) {
  ExprPtr node = NewExpr(ExprKind::kCall, Cur());
  StartAt(*node, callee.get());
  node->children.push_back(std::move(callee));
  if (!ParseArgs(*node)) return nullptr;
  return node;
}

// `| name(args) | name2 ...` applied to `operand` (null inside filter blocks).
ExprPtr Parser::ParseFilterChain(ExprPtr operand, bool leading_bar) {
  bool need_bar = leading_bar;
  int links = 0;
  do {
    if (!ChainOk(&links)) return nullptr;
    if (need_bar && !ExpectOp("|")) return nullptr;
    need_bar = true;
    ExprPtr node = NewExpr(ExprKind::kFilter, Cur());
    node->name = ExpectIdentifier();
    while (ok() && SkipOp(".")) node->name.append(".").append(ExpectIdentifier());
    StartAt(*node, operand.get());
    node->children.push_back(std::move(operand));
    if (ok() && IsOp("(") && !ParseArgs(*node)) return nullptr;
    if (!ok()) return nullptr;
    operand = std::move(node);
  } while (IsOp("|"));
  return operand;
}

ExprPtr Parser::ParseFilterExpr(ExprPtr node) {
  int links = 0;
  while (ok() && (!(IsOp("|") || IsName("is") || IsOp("(")) || ChainOk(&links))) {
    if (IsOp("|")) {
      DepthGuard guard(this);
      node = ParseFilterChain(std::move(node));
    } else if (IsName("is")) {
      DepthGuard guard(this);
      node = ParseTest(std::move(node));
    } else if (IsOp("(")) {
      node = ParseCall(std::move(node));
    } else {
      break;
    }
  }
  return ok() ? std::move(node) : nullptr;
}

ExprPtr Parser::ParseTest(ExprPtr operand) {
  ExprPtr node = NewExpr(ExprKind::kTest, Cur());
  Advance();  // is
  node->negated = SkipName("not");
  node->name = ExpectIdentifier();
  while (ok() && SkipOp(".")) node->name.append(".").append(ExpectIdentifier());
  if (!ok()) return nullptr;
  StartAt(*node, operand.get());
  node->children.push_back(std::move(operand));
  const TokenKind k = Cur().kind;
  if (IsOp("(")) {
    if (!ParseArgs(*node)) return nullptr;
  } else if ((k == TokenKind::kName || k == TokenKind::kString || k == TokenKind::kInt ||
              k == TokenKind::kFloat || IsOp("[") || IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) {
      Fail(Cur(), "You cannot chain multiple tests with is");
      return nullptr;
    }
    ExprPtr arg = ParsePrimary();
    if (ok()) arg = ParsePostfix(std::move(arg));
    if (!ok()) return nullptr;
    node->children.push_back(std::move(arg));
  }
  return node;
}
}  // namespace loom::text::jinja::parser_internal
