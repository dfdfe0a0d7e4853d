// Builtin tests (`x is defined`, `n is divisibleby(3)`, ...), as jinja2 defines them.

#include <cmath>

#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/jinja/args.h"
#include "server/text/jinja/interpreter.h"
#include "server/text/jinja/pystr.h"

namespace loom::text::jinja {
namespace {

bool IsInteger(const Value& v) { return v.IsInt(); }

absl::StatusOr<const Value*> OneArg(std::string_view name, const CallArgs& args) {
  if (args.args.size() != 1 || !args.kwargs.empty()) {
    if (args.args.empty() && args.kwargs.size() == 1) return &args.kwargs[0].second;
    return absl::InvalidArgumentError(StrCat("test '", name, "' takes one argument"));
  }
  return &args.args[0];
}

absl::StatusOr<bool> CompareTest(std::string_view name, const Value& v, const CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(const Value* other, OneArg(name, args));
  if (name == "equalto" || name == "eq" || name == "==") return v.Equals(*other);
  if (name == "ne" || name == "!=") return !v.Equals(*other);
  if (name == "lt" || name == "lessthan" || name == "<") return CompareOp("<", v, *other);
  if (name == "le" || name == "<=") return CompareOp("<=", v, *other);
  if (name == "gt" || name == "greaterthan" || name == ">") return CompareOp(">", v, *other);
  return CompareOp(">=", v, *other);
}

}  // namespace

bool IsKnownTest(std::string_view name) {
  static constexpr std::string_view kTests[] = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true",
      "false", "mapping", "sequence", "iterable", "callable", "escaped", "lower", "upper", "odd",
      "even", "divisibleby", "sameas", "in", "equalto", "eq", "==", "ne", "!=", "lt",
      "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">="};
  for (std::string_view n : kTests) {
    if (n == name) return true;
  }
  return false;
}

absl::StatusOr<bool> ApplyTest(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
  if (name == "defined") return !v.IsUndefined();
  if (name == "undefined") return v.IsUndefined();
  if (name == "none") return v.IsNone();
  if (name == "string") return v.IsString();
  if (name == "number") return v.IsNumber();
  if (name == "integer") return IsInteger(v);
  if (name == "float") return v.IsFloat();
  if (name == "boolean") return v.IsBool();
  if (name == "true") return v.IsBool() && v.AsBool();
  if (name == "false") return v.IsBool() && !v.AsBool();
  if (name == "mapping") return v.IsDict() && !v.IsNamespace();
  if (name == "sequence") {
    return v.IsString() || v.IsSequence() || (v.IsDict() && !v.IsNamespace()) || v.IsUndefined();
  }
  if (name == "iterable") return v.IsString() || v.IsSequence() || (v.IsDict() && !v.IsNamespace()) || v.IsUndefined();
  if (name == "callable") return v.IsCallable() || v.IsUndefined();  // Undefined has __call__
  if (name == "escaped") return false;
  if (name == "lower") return v.IsString() && pystr::IsLower(v.AsString());
  if (name == "upper") return v.IsString() && pystr::IsUpper(v.AsString());
  if (name == "odd" || name == "even") {
    if (!v.IsNumber()) {
      LOOM_RETURN_IF_ERROR(RequireDefined(v));
      return absl::InvalidArgumentError(StrCat("test '", name, "' needs a number"));
    }
    // Python: value % 2 == 1 (odd) or == 0 (even); 2.5 is neither.
    double rem = v.IsFloat() ? std::fmod(v.AsDouble(), 2.0) : static_cast<double>(v.AsInt() % 2);
    if (rem < 0) rem += 2.0;
    return name == "odd" ? rem == 1.0 : rem == 0.0;
  }
  if (name == "divisibleby") {
    LOOM_ASSIGN_OR_RETURN(const Value* n, OneArg(name, args));
    if (!v.IsNumber() || !n->IsNumber()) return absl::InvalidArgumentError("divisibleby needs numbers");
    if (n->AsDouble() == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
    if (!v.IsFloat() && !n->IsFloat()) {
      if (n->AsInt() == -1) return true;
      return v.AsInt() % n->AsInt() == 0;
    }
    return std::fmod(v.AsDouble(), n->AsDouble()) == 0;
  }
  if (name == "sameas") {
    LOOM_ASSIGN_OR_RETURN(const Value* other, OneArg(name, args));
    if (v.kind() != other->kind()) return false;
    if (v.IsDict()) return v.dict_ptr() == other->dict_ptr();
    if (v.IsSequence()) return &v.AsList() == &other->AsList();
    return v.Equals(*other);
  }
  if (name == "in") {
    LOOM_ASSIGN_OR_RETURN(const Value* container, OneArg(name, args));
    return Contains(*container, v);
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "ne" || name == "!=" ||
      name == "lt" || name == "lessthan" || name == "<" || name == "le" || name == "<=" ||
      name == "gt" || name == "greaterthan" || name == ">" || name == "ge" || name == ">=") {
    return CompareTest(name, v, args);
  }
  return absl::InvalidArgumentError(StrCat("No test named '", name, "'."));
}

}  // namespace loom::text::jinja
