// Expression evaluation of the Interpreter.

#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/jinja/interpreter.h"

namespace loom::text::jinja {

absl::StatusOr<Value> Interpreter::Eval(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  if (++depth_ > options_.max_depth) {
    --depth_;
    return AtPosition(expr.line, expr.column,
                      absl::InvalidArgumentError("expression nested too deeply (recursion limit)"));
  }
  absl::StatusOr<Value> result;
  absl::Status step = Step();
  if (step.ok()) {
    result = EvalNode(expr, frame);
    if (result.ok() && result->depth() > kMaxValueDepth) {
      result = absl::InvalidArgumentError("value nested too deeply");
    }
  } else {
    result = step;
  }
  --depth_;
  if (!result.ok()) return AtPosition(expr.line, expr.column, result.status());
  return result;
}

absl::Status Interpreter::EvalArgs(const Expr& expr, size_t first, const std::shared_ptr<Frame>& frame,
                                   CallArgs* args) {
  for (size_t i = first; i < expr.children.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Value v, Eval(*expr.children[i], frame));
    args->args.push_back(std::move(v));
  }
  for (const auto& [key, value_expr] : expr.kwargs) {
    LOOM_ASSIGN_OR_RETURN(Value v, Eval(*value_expr, frame));
    args->kwargs.emplace_back(key, std::move(v));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::EvalNode(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  switch (expr.kind) {
    case ExprKind::kLiteral:
      return expr.literal;
    case ExprKind::kName: {
      const Value* v = frame->Lookup(expr.name);
      if (v != nullptr) return *v;
      return Value::Undefined(StrCat("'", expr.name, "' is undefined"));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      for (const ExprPtr& child : expr.children) {
        LOOM_ASSIGN_OR_RETURN(Value v, Eval(*child, frame));
        items.push_back(std::move(v));
      }
      return expr.kind == ExprKind::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
    }
    case ExprKind::kDict:
      return EvalDict(expr, frame);
    case ExprKind::kGetAttr: {
      LOOM_ASSIGN_OR_RETURN(Value obj, Eval(*expr.children[0], frame));
      return GetAttr(obj, expr.name);
    }
    case ExprKind::kGetItem: {
      LOOM_ASSIGN_OR_RETURN(Value obj, Eval(*expr.children[0], frame));
      LOOM_ASSIGN_OR_RETURN(Value key, Eval(*expr.children[1], frame));
      return GetItem(obj, key);
    }
    case ExprKind::kSlice:
      return EvalSlice(expr, frame);
    case ExprKind::kCall:
      return EvalCall(expr, frame);
    case ExprKind::kFilter: {
      LOOM_ASSIGN_OR_RETURN(Value operand, Eval(*expr.children[0], frame));
      return EvalFilter(expr, operand, frame);
    }
    case ExprKind::kTest:
      return EvalTest(expr, frame);
    case ExprKind::kUnary:
      return EvalUnary(expr, frame);
    case ExprKind::kBinary:
      return EvalBinary(expr, frame);
    case ExprKind::kCompare:
      return EvalCompare(expr, frame);
    case ExprKind::kCondExpr: {
      LOOM_ASSIGN_OR_RETURN(Value cond, Eval(*expr.children[0], frame));
      if (cond.Truthy()) return Eval(*expr.children[1], frame);
      if (expr.children[2]) return Eval(*expr.children[2], frame);
      return Value::Undefined(StrCat("the inline if-expression on line ", expr.line,
                                     " evaluated to false and no else section was defined."));
    }
  }
  return absl::InternalError("unknown expression");
}

absl::StatusOr<Value> Interpreter::EvalDict(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  auto dict = std::make_shared<Dict>();
  for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
    LOOM_ASSIGN_OR_RETURN(Value key, Eval(*expr.children[i], frame));
    if (key.IsList() || key.IsDict() || key.IsUndefined()) {
      return absl::InvalidArgumentError(StrCat("unhashable type: '", key.TypeName(), "'"));
    }
    LOOM_ASSIGN_OR_RETURN(Value value, Eval(*expr.children[i + 1], frame));
    dict->Set(std::move(key), std::move(value));
  }
  return Value::FromDict(std::move(dict));
}

absl::StatusOr<Value> Interpreter::EvalSlice(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  LOOM_ASSIGN_OR_RETURN(Value obj, Eval(*expr.children[0], frame));
  Value parts[3] = {Value::None(), Value::None(), Value::None()};
  for (int i = 0; i < 3; ++i) {
    if (expr.children[i + 1]) {
      LOOM_ASSIGN_OR_RETURN(parts[i], Eval(*expr.children[i + 1], frame));
    }
  }
  return Slice(obj, parts[0], parts[1], parts[2]);
}

absl::StatusOr<Value> Interpreter::EvalUnary(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  LOOM_ASSIGN_OR_RETURN(Value v, Eval(*expr.children[0], frame));
  if (expr.name == "not") return Value::Bool(!v.Truthy());
  if (!v.IsNumber()) {
    LOOM_RETURN_IF_ERROR(RequireDefined(v));
    return absl::InvalidArgumentError(
        StrCat("bad operand type for unary ", expr.name, ": '", v.TypeName(), "'"));
  }
  if (expr.name == "+") return v.IsFloat() ? v : Value::Int(v.AsInt());
  if (v.IsFloat()) return Value::Float(-v.AsDouble());
  if (v.AsInt() == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
  return Value::Int(-v.AsInt());
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  LOOM_ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], frame));
  if (expr.name == "and") return left.Truthy() ? Eval(*expr.children[1], frame) : left;
  if (expr.name == "or") return left.Truthy() ? left : Eval(*expr.children[1], frame);
  LOOM_ASSIGN_OR_RETURN(Value right, Eval(*expr.children[1], frame));
  return BinaryOp(*this, expr.name, left, right);
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  LOOM_ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], frame));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Value right, Eval(*expr.children[i + 1], frame));
    const std::string& op = expr.ops[i];
    bool result = false;
    if (op == "in" || op == "notin") {
      LOOM_ASSIGN_OR_RETURN(result, Contains(right, left));
      if (op == "notin") result = !result;
    } else {
      LOOM_ASSIGN_OR_RETURN(result, CompareOp(op, left, right));
    }
    if (!result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  LOOM_ASSIGN_OR_RETURN(Value callee, Eval(*expr.children[0], frame));
  if (!callee.IsCallable()) {
    LOOM_RETURN_IF_ERROR(RequireDefined(callee));
    return absl::InvalidArgumentError(StrCat("'", callee.TypeName(), "' object is not callable"));
  }
  CallArgs args;
  LOOM_RETURN_IF_ERROR(EvalArgs(expr, 1, frame, &args));
  return callee.AsCallable().Call(*this, args);
}

absl::StatusOr<Value> Interpreter::EvalFilter(const Expr& expr, const Value& operand,
                                              const std::shared_ptr<Frame>& frame) {
  CallArgs args;
  LOOM_RETURN_IF_ERROR(EvalArgs(expr, 1, frame, &args));
  return ApplyFilter(*this, expr.name, operand, args);
}

absl::StatusOr<Value> Interpreter::EvalFilterChain(const Expr& expr, const Value& base,
                                                   const std::shared_ptr<Frame>& frame) {
  Value input = base;
  if (expr.children[0]) {
    LOOM_ASSIGN_OR_RETURN(input, EvalFilterChain(*expr.children[0], base, frame));
  }
  return EvalFilter(expr, input, frame);
}

absl::StatusOr<Value> Interpreter::EvalTest(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  LOOM_ASSIGN_OR_RETURN(Value operand, Eval(*expr.children[0], frame));
  CallArgs args;
  LOOM_RETURN_IF_ERROR(EvalArgs(expr, 1, frame, &args));
  LOOM_ASSIGN_OR_RETURN(bool result, ApplyTest(*this, expr.name, operand, args));
  return Value::Bool(result != expr.negated);
}

}  // namespace loom::text::jinja
