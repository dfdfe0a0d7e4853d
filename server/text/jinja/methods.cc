// Methods of str, dict and list that HF's immutable sandbox lets a template call. Mutating list
// and dict methods (append, pop, update, ...) are absent: calling one is an error, as in the
// sandbox.

#include <cctype>
#include <cstdlib>

#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/jinja/args.h"
#include "server/text/jinja/interpreter.h"
#include "server/text/jinja/pystr.h"

namespace loom::text::jinja {
namespace {

constexpr std::string_view kStringMethods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "lower", "upper",
    "title", "capitalize", "replace", "find", "rfind", "count", "format", "join", "splitlines",
    "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "removeprefix",
    "removesuffix"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};
constexpr std::string_view kListMethods[] = {"index", "count"};

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.substr(0, prefix.size()) == prefix;
}
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

template <size_t N>
bool In(const std::string_view (&names)[N], std::string_view name) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

absl::StatusOr<bool> AffixMatch(const Value& affix, std::string_view s, bool prefix) {
  if (affix.IsString()) {
    return prefix ? StartsWith(s, affix.AsString()) : EndsWith(s, affix.AsString());
  }
  if (affix.IsTuple()) {
    for (const Value& v : affix.AsList()) {
      LOOM_ASSIGN_OR_RETURN(bool match, AffixMatch(v, s, prefix));
      if (match) return true;
    }
    return false;
  }
  return absl::InvalidArgumentError(StrCat(prefix ? "startswith" : "endswith",
                                           " first arg must be str or a tuple of str, not ",
                                           affix.TypeName()));
}

template <typename Pred>
bool AllChars(std::string_view s, Pred pred) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!pred(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::StatusOr<Value> Format(std::string_view fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}' ) {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string_view::npos) return absl::InvalidArgumentError("Single '{' encountered in format string");
    const std::string_view field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string_view::npos) {
      return absl::InvalidArgumentError("format specs are not supported in str.format");
    }
    const Value* v = nullptr;
    if (field.empty() || (field[0] >= '0' && field[0] <= '9')) {
      const size_t index = field.empty() ? auto_index++ : std::strtoull(std::string(field).c_str(), nullptr, 10);
      if (index >= args.args.size()) return absl::InvalidArgumentError("Replacement index out of range");
      v = &args.args[index];
    } else {
      for (const auto& [key, value] : args.kwargs) {
        if (key == field) v = &value;
      }
      if (v == nullptr) return absl::InvalidArgumentError(StrCat("KeyError: '", field, "'"));
    }
    out += v->Str();
    i = close;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> StringQueryMethod(Interpreter& interp, const std::string& s,
                                        std::string_view name, CallArgs& args);

// The str methods that transform: strip, split, affixes, case, replace.
absl::StatusOr<Value> StringMethod(Interpreter& interp, const std::string& s, std::string_view name,
                                   CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"chars"}));
    LOOM_ASSIGN_OR_RETURN(std::optional<std::string> chars, a.OptString(0));
    return Value::String(pystr::Strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"sep", "maxsplit"}));
    LOOM_ASSIGN_OR_RETURN(std::optional<std::string> sep, a.OptString(0));
    LOOM_ASSIGN_OR_RETURN(int64_t maxsplit, a.Int(1, -1));
    if (sep && sep->empty()) return absl::InvalidArgumentError("empty separator");
    ValueList parts;
    for (std::string& p : pystr::Split(s, sep, maxsplit, name == "rsplit")) parts.push_back(Value::String(std::move(p)));
    return Value::List(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") {
    LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"affix"}));
    LOOM_ASSIGN_OR_RETURN(bool match, AffixMatch(a.Get(0), s, name == "startswith"));
    return Value::Bool(match);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"affix"}));
    LOOM_ASSIGN_OR_RETURN(std::optional<std::string> affix, a.OptString(0));
    std::string_view view = s;
    if (affix && name == "removeprefix" && StartsWith(view, *affix)) view.remove_prefix(affix->size());
    if (affix && name == "removesuffix" && EndsWith(view, *affix)) view.remove_suffix(affix->size());
    return Value::String(std::string(view));
  }
  if (name == "lower") return Value::String(pystr::Lower(s));
  if (name == "upper") return Value::String(pystr::Upper(s));
  if (name == "title") return Value::String(pystr::Title(s));
  if (name == "capitalize") return Value::String(pystr::Capitalize(s));
  if (name == "replace") {
    LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"old", "new", "count"}));
    LOOM_ASSIGN_OR_RETURN(std::optional<std::string> old, a.OptString(0));
    LOOM_ASSIGN_OR_RETURN(std::optional<std::string> repl, a.OptString(1));
    LOOM_ASSIGN_OR_RETURN(int64_t count, a.Int(2, -1));
    if (!old || !repl) return absl::InvalidArgumentError("replace() needs two string arguments");
    std::string out = pystr::Replace(s, *old, *repl, count);
    LOOM_RETURN_IF_ERROR(interp.CheckSize(out.size()));
    return Value::String(std::move(out));
  }
  return StringQueryMethod(interp, s, name, args);
}

// The str methods that search, format, join or classify.
absl::StatusOr<Value> StringQueryMethod(Interpreter& interp, const std::string& s,
                                        std::string_view name, CallArgs& args) {
  if (name == "find" || name == "rfind" || name == "count") {
    LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"sub"}));
    LOOM_ASSIGN_OR_RETURN(std::optional<std::string> sub, a.OptString(0));
    if (!sub) return absl::InvalidArgumentError(StrCat(name, "() needs a string argument"));
    if (name == "count") return Value::Int(pystr::Count(s, *sub));
    return Value::Int(pystr::Find(s, *sub, name == "rfind"));
  }
  if (name == "format") return Format(s, args);
  if (name == "join") {
    LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"iterable"}));
    LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(a.Get(0)));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].IsString()) {
        return absl::InvalidArgumentError(StrCat("sequence item ", i, ": expected str instance, ",
                                                 items[i].TypeName(), " found"));
      }
      if (i > 0) out += s;
      out += items[i].AsString();
      LOOM_RETURN_IF_ERROR(interp.CheckSize(out.size()));
    }
    return Value::String(std::move(out));
  }
  if (name == "splitlines") {
    ValueList lines;
    for (std::string& line : pystr::SplitLines(s)) lines.push_back(Value::String(std::move(line)));
    return Value::List(std::move(lines));
  }
  if (name == "isdigit") return Value::Bool(AllChars(s, [](int c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value::Bool(AllChars(s, [](int c) { return std::isalpha(c) || c >= 0x80; }));
  if (name == "isalnum") return Value::Bool(AllChars(s, [](int c) { return std::isalnum(c) || c >= 0x80; }));
  if (name == "isspace") return Value::Bool(!s.empty() && pystr::Strip(s, std::nullopt, true, true).empty());
  if (name == "islower") return Value::Bool(pystr::IsLower(s));
  if (name == "isupper") return Value::Bool(pystr::IsUpper(s));
  return absl::InvalidArgumentError(StrCat("'str' object has no attribute '", name, "'"));
}

absl::StatusOr<Value> DictMethod(const Value& obj, std::string_view name, CallArgs& args) {
  const Dict& dict = obj.AsDict();
  if (name == "get") {
    LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"key", "default"}));
    const Value* v = dict.Find(a.Get(0));
    return v != nullptr ? *v : a.Get(1, Value::None());
  }
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {}));
  ValueList out;
  for (const auto& [key, value] : dict.items) {
    if (name == "items") {
      out.push_back(Value::Tuple({key, value}));
    } else {
      out.push_back(name == "keys" ? key : value);
    }
  }
  return Value::View(std::move(out), StrCat("dict_", name), false);
}

absl::StatusOr<Value> ListMethod(const Value& obj, std::string_view name, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"value"}));
  const ValueList& items = obj.AsList();
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].Equals(a.Get(0))) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return absl::InvalidArgumentError(StrCat(a.Get(0).Repr(), " is not in list"));
  return Value::Int(count);
}

class MethodCallable : public Callable {
 public:
  MethodCallable(Value obj, std::string name) : obj_(std::move(obj)), name_(std::move(name)) {}
  absl::StatusOr<Value> Call(Interpreter& interp, CallArgs& args) const override {
    if (obj_.IsString()) return StringMethod(interp, obj_.AsString(), name_, args);
    if (obj_.IsDict()) return DictMethod(obj_, name_, args);
    return ListMethod(obj_, name_, args);
  }
  std::string Name() const override { return StrCat(obj_.TypeName(), ".", name_); }

 private:
  Value obj_;
  std::string name_;
};

}  // namespace

Value BoundMethod(const Value& obj, std::string_view name) {
  const bool known = (obj.IsString() && In(kStringMethods, name)) ||
                     (obj.IsDict() && !obj.IsNamespace() && In(kDictMethods, name)) ||
                     (obj.IsSequence() && In(kListMethods, name));
  if (!known) return Value::Undefined();
  return Value::Function(std::make_shared<MethodCallable>(obj, std::string(name)));
}

}  // namespace loom::text::jinja
