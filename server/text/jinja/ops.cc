// Python semantics of operators, attribute and item access, slicing and iteration.

#include <cmath>
#include <limits>

#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/jinja/interpreter.h"
#include "engine/common/utf8.h"

namespace loom::text::jinja {
namespace {

absl::Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  LOOM_RETURN_IF_ERROR(RequireDefined(a));
  LOOM_RETURN_IF_ERROR(RequireDefined(b));
  return absl::InvalidArgumentError(StrCat("unsupported operand type(s) for ", op, ": '",
                                           a.TypeName(), "' and '", b.TypeName(), "'"));
}

bool IsAscii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// jinja2's name for the type of `obj` in undefined messages.
std::string ObjectTypeRepr(const Value& obj) {
  if (obj.IsNone()) return "None";
  return StrCat(obj.TypeName(), " object");
}

absl::StatusOr<Value> Repeat(Interpreter& interp, const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.IsString()) {
    const size_t len = seq.AsString().size();
    if (len > 0) LOOM_RETURN_IF_ERROR(interp.CheckSize(len * static_cast<uint64_t>(std::min<int64_t>(times, INT32_MAX))));
    std::string out;
    if (len > 0) {
      for (int64_t i = 0; i < times; ++i) out += seq.AsString();
    }
    return Value::String(std::move(out));
  }
  const size_t len = seq.AsList().size();
  if (len > 0 && times > 0 && static_cast<int64_t>(len) * std::min<int64_t>(times, INT32_MAX) > interp.options().max_range) {
    return absl::InvalidArgumentError("sequence repetition too large");
  }
  ValueList out;
  if (len > 0) {
    for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.AsList().begin(), seq.AsList().end());
  }
  return seq.IsTuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

absl::StatusOr<Value> IntArith(std::string_view op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(a, b, &r)) return absl::InvalidArgumentError("integer overflow");
  } else if (op == "-") {
    if (__builtin_sub_overflow(a, b, &r)) return absl::InvalidArgumentError("integer overflow");
  } else if (op == "*") {
    if (__builtin_mul_overflow(a, b, &r)) return absl::InvalidArgumentError("integer overflow");
  } else if (op == "//" || op == "%") {
    if (b == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
    if (a == INT64_MIN && b == -1) return absl::InvalidArgumentError("integer overflow");
    int64_t q = a / b;
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) {
      --q;
      m += b;
    }
    r = op == "//" ? q : m;
  } else if (op == "**") {
    if (b < 0) return Value::Float(std::pow(static_cast<double>(a), static_cast<double>(b)));
    r = 1;
    int64_t base = a;
    for (int64_t e = b; e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return absl::InvalidArgumentError("integer overflow");
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) return absl::InvalidArgumentError("integer overflow");
    }
  }
  return Value::Int(r);
}

absl::StatusOr<Value> FloatArith(std::string_view op, double a, double b) {
  if (op == "+") return Value::Float(a + b);
  if (op == "-") return Value::Float(a - b);
  if (op == "*") return Value::Float(a * b);
  if (op == "**") return Value::Float(std::pow(a, b));
  if (b == 0) return absl::InvalidArgumentError("float division by zero");
  if (op == "/") return Value::Float(a / b);
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  if (op == "%") return Value::Float(m);
  return Value::Float(std::floor(a / b));
}

}  // namespace

absl::Status RequireDefined(const Value& v) {
  if (!v.IsUndefined()) return absl::OkStatus();
  return absl::InvalidArgumentError(v.undefined_name().empty() ? "value is undefined" : v.undefined_name());
}

std::vector<std::string> CodePoints(std::string_view s) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 1;
    DecodeUtf8(s, pos, &len);
    out.emplace_back(s.substr(pos, len));
    pos += len;
  }
  return out;
}

absl::StatusOr<std::string> PercentFormat(std::string_view fmt, const ValueList& args) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      out.push_back(fmt[i]);
      continue;
    }
    const char spec = fmt[++i];
    if (spec == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= args.size()) return absl::InvalidArgumentError("not enough arguments for format string");
    const Value& arg = args[next++];
    if (spec == 's') {
      out += arg.Str();
    } else if (spec == 'r') {
      out += arg.Repr();
    } else if ((spec == 'd' || spec == 'i') && arg.IsNumber()) {
      out += std::to_string(arg.AsInt());
    } else {
      return absl::InvalidArgumentError(StrCat("unsupported format character '", std::string(1, spec), "'"));
    }
  }
  return out;
}

absl::StatusOr<Value> BinaryOp(Interpreter& interp, std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string left = a.Str();
    std::string right = b.Str();
    LOOM_RETURN_IF_ERROR(interp.CheckSize(left.size() + right.size()));
    return Value::String(left + right);
  }
  if (a.IsNumber() && b.IsNumber()) {
    if (op == "/") {
      if (b.AsDouble() == 0) return absl::InvalidArgumentError("division by zero");
      return Value::Float(a.AsDouble() / b.AsDouble());
    }
    if (!a.IsFloat() && !b.IsFloat()) return IntArith(op, a.AsInt(), b.AsInt());
    if (op == "//") {
      if (b.AsDouble() == 0) return absl::InvalidArgumentError("float floor division by zero");
      return Value::Float(std::floor(a.AsDouble() / b.AsDouble()));
    }
    return FloatArith(op, a.AsDouble(), b.AsDouble());
  }
  if (op == "+") {
    if (a.IsString() && b.IsString()) {
      LOOM_RETURN_IF_ERROR(interp.CheckSize(a.AsString().size() + b.AsString().size()));
      return Value::String(a.AsString() + b.AsString());
    }
    if ((a.IsList() && b.IsList()) || (a.IsTuple() && b.IsTuple())) {
      ValueList items = a.AsList();
      items.insert(items.end(), b.AsList().begin(), b.AsList().end());
      return a.IsList() ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
    }
  }
  if (op == "%" && a.IsString()) {
    LOOM_ASSIGN_OR_RETURN(std::string out, PercentFormat(a.AsString(), b.IsTuple() ? b.AsList() : ValueList{b}));
    return Value::String(std::move(out));
  }
  if (op == "*") {
    if ((a.IsString() || a.IsSequence()) && b.IsNumber() && !b.IsFloat()) return Repeat(interp, a, b.AsInt());
    if ((b.IsString() || b.IsSequence()) && a.IsNumber() && !a.IsFloat()) return Repeat(interp, b, a.AsInt());
  }
  return Unsupported(op, a, b);
}

absl::StatusOr<bool> LessThan(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    if (!a.IsFloat() && !b.IsFloat()) return a.AsInt() < b.AsInt();
    return a.AsDouble() < b.AsDouble();
  }
  if (a.IsString() && b.IsString()) return a.AsString() < b.AsString();
  if ((a.IsList() && b.IsList()) || (a.IsTuple() && b.IsTuple())) {
    const ValueList& x = a.AsList();
    const ValueList& y = b.AsList();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].Equals(y[i])) continue;
      return LessThan(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  LOOM_RETURN_IF_ERROR(RequireDefined(a));
  LOOM_RETURN_IF_ERROR(RequireDefined(b));
  return absl::InvalidArgumentError(StrCat("'<' not supported between instances of '", a.TypeName(),
                                           "' and '", b.TypeName(), "'"));
}

absl::StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return a.Equals(b);
  if (op == "!=") return !a.Equals(b);
  if (op == "<") return LessThan(a, b);
  if (op == ">") return LessThan(b, a);
  LOOM_ASSIGN_OR_RETURN(bool less, op == "<=" ? LessThan(b, a) : LessThan(a, b));
  return !less;  // a <= b is not (b < a); a >= b is not (a < b)
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.IsString()) {
        return absl::InvalidArgumentError(
            StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.AsString().find(item.AsString()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const Value& v : container.AsList()) {
        if (v.Equals(item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.AsDict().Find(item) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      return absl::InvalidArgumentError(
          StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name) {
  LOOM_RETURN_IF_ERROR(RequireDefined(obj));
  if (obj.IsNamespace()) {
    const Value* v = obj.AsDict().Find(name);
    if (v != nullptr) return *v;
  } else {
    Value method = BoundMethod(obj, name);
    if (!method.IsUndefined()) return method;
    if (obj.IsDict()) {
      const Value* v = obj.AsDict().Find(name);
      if (v != nullptr) return *v;
    }
  }
  return Value::Undefined(StrCat("'", ObjectTypeRepr(obj), "' has no attribute '", name, "'"));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  LOOM_RETURN_IF_ERROR(RequireDefined(obj));
  if (obj.IsDict() && !obj.IsNamespace()) {
    const Value* v = obj.AsDict().Find(key);
    if (v != nullptr) return *v;
  } else if ((obj.IsSequence() || obj.IsString()) && key.IsNumber() && !key.IsFloat()) {
    int64_t index = key.AsInt();
    if (obj.IsString()) {
      const std::string& s = obj.AsString();
      if (IsAscii(s)) {
        const int64_t n = static_cast<int64_t>(s.size());
        if (index < 0) index += n;
        if (index >= 0 && index < n) return Value::String(std::string(1, s[index]));
      } else {
        std::vector<std::string> cps = CodePoints(s);
        const int64_t n = static_cast<int64_t>(cps.size());
        if (index < 0) index += n;
        if (index >= 0 && index < n) return Value::String(cps[index]);
      }
    } else {
      const int64_t n = static_cast<int64_t>(obj.AsList().size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return obj.AsList()[index];
    }
  }
  if (key.IsString()) return GetAttr(obj, key.AsString());
  return Value::Undefined(StrCat("'", ObjectTypeRepr(obj), "' has no element ", key.Repr()));
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  LOOM_RETURN_IF_ERROR(RequireDefined(obj));
  for (const Value* v : {&start_v, &stop_v, &step_v}) {
    if (!v->IsNone() && !(v->IsNumber() && !v->IsFloat())) {
      return absl::InvalidArgumentError("slice indices must be integers or None");
    }
  }
  const bool is_string = obj.IsString();
  if (!is_string && !obj.IsSequence()) {
    // jinja2 compiles a slice to a plain Python subscript, so the TypeError propagates.
    return absl::InvalidArgumentError(StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  std::vector<std::string> cps;
  if (is_string) cps = CodePoints(obj.AsString());
  const int64_t n = is_string ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.AsList().size());
  const int64_t step = step_v.IsNone() ? 1 : step_v.AsInt();
  if (step == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  auto adjust = [&](const Value& v, int64_t dflt) {
    if (v.IsNone()) return dflt;
    int64_t i = v.AsInt();
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t start = adjust(start_v, step < 0 ? n - 1 : 0);
  const int64_t stop = adjust(stop_v, step < 0 ? -1 : n);
  std::string text;
  ValueList items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (is_string) {
      text += cps[i];
    } else {
      items.push_back(obj.AsList()[i]);
    }
  }
  if (is_string) return Value::String(std::move(text));
  return obj.IsTuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
}

absl::StatusOr<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return v.AsList();
    case Value::Kind::kDict: {
      ValueList keys;
      if (v.IsNamespace()) return absl::InvalidArgumentError("'Namespace' object is not iterable");
      for (const auto& [key, value] : v.AsDict().items) keys.push_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (std::string& cp : CodePoints(v.AsString())) chars.push_back(Value::String(std::move(cp)));
      return chars;
    }
    default:
      return absl::InvalidArgumentError(StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return IsAscii(v.AsString()) ? static_cast<int64_t>(v.AsString().size())
                                   : static_cast<int64_t>(CodePoints(v.AsString()).size());
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return static_cast<int64_t>(v.AsList().size());
    case Value::Kind::kDict:
      if (!v.IsNamespace()) return static_cast<int64_t>(v.AsDict().size());
      [[fallthrough]];
    default:
      return absl::InvalidArgumentError(StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

}  // namespace loom::text::jinja
