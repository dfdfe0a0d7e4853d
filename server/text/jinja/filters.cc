// Builtin filters: jinja2's, with HF's tojson. Each takes the operand and the call's arguments.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/jinja/args.h"
#include "server/text/jinja/interpreter.h"
#include "server/text/jinja/pystr.h"

namespace loom::text::jinja {

// Collection filters (filters_seq.cc).
absl::StatusOr<Value> FilterSequence(Interpreter& interp, std::string_view name, const Value& v,
                                     CallArgs& args, bool* handled);

namespace {

using FilterFn = absl::StatusOr<Value> (*)(Interpreter&, const Value&, CallArgs&);

absl::StatusOr<Value> Trim(Interpreter&, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("trim", args, {"chars"}));
  LOOM_ASSIGN_OR_RETURN(std::optional<std::string> chars, a.OptString(0));
  return Value::String(pystr::Strip(v.Str(), chars, true, true));
}

absl::StatusOr<Value> ToJson(Interpreter& interp, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("tojson", args,
                                                     {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions options;
  options.ensure_ascii = a.Bool(0, false);
  const Value& indent = a.Get(1, Value::None());
  if (indent.IsString()) {
    options.use_indent_string = true;
    options.indent_string = indent.AsString();
  } else if (indent.IsNumber() && !indent.IsFloat()) {
    options.indent = static_cast<int>(std::clamp<int64_t>(indent.AsInt(), 0, 64));
    if (indent.AsInt() < 0) {
      options.use_indent_string = true;  // json.dumps: a negative indent still breaks lines
    }
  } else if (!indent.IsNone()) {
    return absl::InvalidArgumentError("tojson: indent must be an integer or a string");
  }
  const Value& separators = a.Get(2, Value::None());
  if (!separators.IsNone()) {
    if (!separators.IsSequence() || separators.AsList().size() != 2 ||
        !separators.AsList()[0].IsString() || !separators.AsList()[1].IsString()) {
      return absl::InvalidArgumentError("tojson: separators must be a pair of strings");
    }
    options.separators_given = true;
    options.item_separator = separators.AsList()[0].AsString();
    options.key_separator = separators.AsList()[1].AsString();
  }
  options.sort_keys = a.Bool(3, false);
  LOOM_ASSIGN_OR_RETURN(std::string text, DumpJson(v, options));
  LOOM_RETURN_IF_ERROR(interp.CheckSize(text.size()));
  return Value::String(std::move(text));
}

absl::StatusOr<Value> LengthFilter(Interpreter&, const Value& v, CallArgs&) {
  LOOM_ASSIGN_OR_RETURN(int64_t n, Length(v));
  return Value::Int(n);
}

absl::StatusOr<Value> Upper(Interpreter&, const Value& v, CallArgs&) { return Value::String(pystr::Upper(v.Str())); }
absl::StatusOr<Value> Lower(Interpreter&, const Value& v, CallArgs&) { return Value::String(pystr::Lower(v.Str())); }
absl::StatusOr<Value> Capitalize(Interpreter&, const Value& v, CallArgs&) {
  return Value::String(pystr::Capitalize(v.Str()));
}
absl::StatusOr<Value> TitleFilter(Interpreter&, const Value& v, CallArgs&) {
  return Value::String(pystr::JinjaTitle(v.Str()));
}

absl::StatusOr<Value> Default(Interpreter&, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("default", args, {"default_value", "boolean"}));
  if (v.IsUndefined() || (a.Bool(1, false) && !v.Truthy())) return a.Get(0, Value::String(""));
  return v;
}

absl::StatusOr<Value> Replace(Interpreter& interp, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("replace", args, {"old", "new", "count"}));
  LOOM_ASSIGN_OR_RETURN(int64_t count, a.Int(2, -1));
  std::string out = pystr::Replace(v.Str(), a.Get(0).Str(), a.Get(1).Str(), count);
  LOOM_RETURN_IF_ERROR(interp.CheckSize(out.size()));
  return Value::String(std::move(out));
}

absl::StatusOr<Value> StringFilter(Interpreter&, const Value& v, CallArgs&) {
  return v.IsString() ? v : Value::String(v.Str());
}

// Python int(str) for base 10 with jinja2's fallback through float ("42.23"|int == 42).
std::optional<int64_t> ParseInt(const Value& v) {
  if (v.IsNumber()) {
    if (!v.IsFloat()) return v.AsInt();
    if (!std::isfinite(v.AsDouble()) || std::fabs(v.AsDouble()) >= 9.2e18) return std::nullopt;
    return static_cast<int64_t>(v.AsDouble());
  }
  if (!v.IsString()) return std::nullopt;
  std::string s;
  for (char c : pystr::Strip(v.AsString(), std::nullopt, true, true)) {
    if (c != '_') s.push_back(c);
  }
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(s.c_str(), &end, 10);
  if (*end == '\0' && errno == 0) return i;
  const double d = std::strtod(s.c_str(), &end);
  if (*end != '\0' || !std::isfinite(d) || std::fabs(d) >= 9.2e18) return std::nullopt;
  return static_cast<int64_t>(d);
}

absl::StatusOr<Value> IntFilter(Interpreter&, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("int", args, {"default", "base"}));
  std::optional<int64_t> i = ParseInt(v);
  if (!i) return a.Get(0, Value::Int(0));
  return Value::Int(*i);
}

absl::StatusOr<Value> FloatFilter(Interpreter&, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("float", args, {"default"}));
  if (v.IsNumber()) return Value::Float(v.AsDouble());
  if (v.IsString()) {
    const std::string s = pystr::Strip(v.AsString(), std::nullopt, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value::Float(d);
  }
  return a.Get(0, Value::Float(0.0));
}

absl::StatusOr<Value> Abs(Interpreter&, const Value& v, CallArgs&) {
  if (v.IsFloat()) return Value::Float(std::fabs(v.AsDouble()));
  if (v.IsNumber()) {
    if (v.AsInt() == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
    return Value::Int(v.AsInt() < 0 ? -v.AsInt() : v.AsInt());
  }
  return absl::InvalidArgumentError(StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
}

absl::StatusOr<Value> Round(Interpreter&, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("round", args, {"precision", "method"}));
  LOOM_ASSIGN_OR_RETURN(int64_t precision, a.Int(0, 0));
  const std::string method = a.Has(1) ? a.Get(1).Str() : "common";
  if (!v.IsNumber()) return absl::InvalidArgumentError(StrCat("round: '", v.TypeName(), "' is not a number"));
  if (method != "common" && method != "ceil" && method != "floor") {
    return absl::InvalidArgumentError("method must be common, ceil or floor");
  }
  if (method == "common" && !v.IsFloat()) return Value::Int(v.AsInt());
  precision = std::clamp<int64_t>(precision, -20, 20);
  if (method == "common" && precision >= 0 && std::isfinite(v.AsDouble())) {
    // Python's round() rounds the exact binary value half-to-even, as printf does.
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), v.AsDouble());
    return Value::Float(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.AsDouble() * scale;
  double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
  return Value::Float(r / scale);
}

absl::StatusOr<Value> Indent(Interpreter& interp, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("indent", args, {"width", "first", "blank"}));
  if (!v.IsString()) {
    LOOM_RETURN_IF_ERROR(RequireDefined(v));
    return absl::InvalidArgumentError(StrCat("indent: unsupported operand type '", v.TypeName(), "'"));
  }
  std::string indention;
  const Value& width = a.Get(0, Value::Int(4));
  if (width.IsString()) {
    indention = width.AsString();
  } else {
    LOOM_ASSIGN_OR_RETURN(int64_t n, a.Int(0, 4));
    LOOM_RETURN_IF_ERROR(interp.CheckSize(static_cast<size_t>(std::max<int64_t>(n, 0))));
    indention.assign(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  }
  std::vector<std::string> lines = pystr::SplitLines(v.Str() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out.push_back('\n');
    const bool indent_line = (i > 0 || a.Bool(1, false)) && (a.Bool(2, false) || !lines[i].empty());
    if (indent_line) out += indention;
    out += lines[i];
    LOOM_RETURN_IF_ERROR(interp.CheckSize(out.size()));
  }
  if (lines.empty() && a.Bool(1, false)) out = indention;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> WordCount(Interpreter&, const Value& v, CallArgs&) {
  int64_t words = 0;
  bool in_word = false;
  for (unsigned char c : v.Str()) {
    const bool word_char = std::isalnum(c) || c == '_' || c >= 0x80;
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::Int(words);
}

absl::StatusOr<Value> Escape(Interpreter&, const Value& v, CallArgs&) {
  std::string out;
  for (char c : v.Str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Attr(Interpreter&, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("attr", args, {"name"}));
  // Python attributes only: a dict's items are not attributes.
  if (v.IsDict() && !v.IsNamespace()) {
    Value method = BoundMethod(v, a.Get(0).Str());
    if (!method.IsUndefined()) return method;
    return Value::Undefined(StrCat("'dict object' has no attribute '", a.Get(0).Str(), "'"));
  }
  return GetAttr(v, a.Get(0).Str());
}

// printf-style "%s"|format(args).
absl::StatusOr<Value> FormatFilter(Interpreter&, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(std::string out, PercentFormat(v.Str(), args.args));
  return Value::String(std::move(out));
}

const absl::flat_hash_map<std::string_view, FilterFn>& Filters() {
  static const auto* const kFilters = new absl::flat_hash_map<std::string_view, FilterFn>{
      {"trim", Trim},           {"tojson", ToJson},         {"length", LengthFilter},
      {"count", LengthFilter},  {"upper", Upper},           {"lower", Lower},
      {"capitalize", Capitalize}, {"title", TitleFilter},   {"default", Default},
      {"d", Default},           {"replace", Replace},       {"string", StringFilter},
      {"safe", StringFilter},   {"int", IntFilter},         {"float", FloatFilter},
      {"abs", Abs},             {"round", Round},           {"indent", Indent},
      {"wordcount", WordCount}, {"escape", Escape},         {"e", Escape},
      {"forceescape", Escape},  {"attr", Attr},             {"format", FormatFilter},
  };
  return *kFilters;
}

}  // namespace

bool IsKnownFilter(std::string_view name) {
  static constexpr std::string_view kSequenceFilters[] = {
      "items", "first", "last", "join", "list", "map", "select", "reject", "selectattr",
      "rejectattr", "sort", "dictsort", "unique", "reverse", "batch", "sum", "min", "max"};
  if (Filters().contains(name)) return true;
  for (std::string_view n : kSequenceFilters) {
    if (n == name) return true;
  }
  return false;
}

absl::StatusOr<Value> ApplyFilter(Interpreter& interp, std::string_view name, const Value& operand,
                                  CallArgs& args) {
  auto it = Filters().find(name);
  if (it != Filters().end()) {
    if (name != "default" && name != "d" && name != "length" && name != "count" &&
        name != "string" && name != "safe" && name != "trim" && name != "upper" && name != "lower" &&
        name != "escape" && name != "e" && name != "capitalize" &&
        name != "title" && name != "wordcount" && name != "indent" && name != "replace" &&
        name != "format") {
      LOOM_RETURN_IF_ERROR(RequireDefined(operand));
    }
    return it->second(interp, operand, args);
  }
  bool handled = false;
  absl::StatusOr<Value> result = FilterSequence(interp, name, operand, args, &handled);
  if (handled) return result;
  return absl::InvalidArgumentError(StrCat("No filter named '", name, "'."));
}

}  // namespace loom::text::jinja
