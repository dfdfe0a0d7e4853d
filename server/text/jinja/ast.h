// Syntax tree of a parsed Jinja template. Built once by the parser, then only read: a tree is
// shared by every thread that renders the template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/text/jinja/value.h"

namespace loom::text::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kLiteral,   // literal
  kName,      // name
  kList,      // children: items
  kTuple,     // children: items
  kDict,      // children: key, value, key, value, ...
  kGetAttr,   // children[0].name
  kGetItem,   // children[0][children[1]]
  kSlice,     // children[0][children[1]:children[2]:children[3]] (null when omitted)
  kCall,      // children[0](children[1..], kwargs)
  kFilter,    // children[0] | name(children[1..], kwargs); children[0] null in a filter block
  kTest,      // children[0] is [not] name(children[1..])
  kUnary,     // name ("-", "+", "not") children[0]
  kBinary,    // children[0] name children[1]: + - * / // % ** ~ and or
  kCompare,   // children[0] ops[0] children[1] ops[1] ...: == != < <= > >= in notin
  kCondExpr,  // children[1] if children[0] else children[2] (null: undefined)
};

// One expression node.
struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches; else_body
  kFor,          // for targets in expr [if filter] body [else else_body]
  kSet,          // set targets = expr, or set targets[0].attr = expr
  kSetBlock,     // set targets[0] [| filter] body endset
  kMacro,        // macro name(params=defaults) body
  kCallBlock,    // call[(params)] expr body endcall
  kFilterBlock,  // filter expr body endfilter
  kBreak,
  kContinue,
  kScope,        // with (targets = values) body / generation body
};

// One statement node.
struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;
  bool recursive = false;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // parallel to params; null where none
  std::vector<ExprPtr> values;    // with: parallel to targets
};

}  // namespace loom::text::jinja
