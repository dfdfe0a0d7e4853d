// Collection filters: first, last, join, items, list, map, select/reject(attr), sort, dictsort,
// unique, reverse, batch, sum, min, max.

#include <algorithm>

#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/jinja/args.h"
#include "server/text/jinja/interpreter.h"
#include "server/text/jinja/pystr.h"

namespace loom::text::jinja {
namespace {

// jinja2's attribute getter: "a.b.0" looks up a, then b, then item 0.
absl::StatusOr<Value> GetPath(const Value& item, const Value& attribute) {
  if (!attribute.IsString()) return GetItem(item, attribute);
  Value current = item;
  for (const std::string& part : pystr::Split(attribute.AsString(), std::string("."), -1, false)) {
    Value key = Value::String(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      key = Value::Int(std::strtoll(part.c_str(), nullptr, 10));
    }
    LOOM_ASSIGN_OR_RETURN(current, GetItem(current, key));
  }
  return current;
}

// Key for sorting/uniqueness: the attribute (if any), lower-cased when not case-sensitive.
absl::StatusOr<Value> SortKey(const Value& item, const Value& attribute, bool case_sensitive) {
  Value key = item;
  if (!attribute.IsUndefined() && !attribute.IsNone()) {
    LOOM_ASSIGN_OR_RETURN(key, GetPath(item, attribute));
  }
  if (!case_sensitive && key.IsString()) return Value::String(pystr::Lower(key.AsString()));
  return key;
}

absl::Status SortValues(std::vector<std::pair<Value, Value>>& keyed, bool reverse) {
  absl::Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    if (!error.ok()) return false;
    absl::StatusOr<bool> less = reverse ? LessThan(y.first, x.first) : LessThan(x.first, y.first);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  return error;
}

absl::StatusOr<Value> Sort(const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("sort", args, {"reverse", "case_sensitive", "attribute"}));
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    LOOM_ASSIGN_OR_RETURN(Value key, SortKey(item, a.Get(2), a.Bool(1, false)));
    keyed.emplace_back(std::move(key), std::move(item));
  }
  LOOM_RETURN_IF_ERROR(SortValues(keyed, a.Bool(0, false)));
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> DictSort(const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (!v.IsDict() || v.IsNamespace()) return absl::InvalidArgumentError("dictsort needs a mapping");
  const std::string by = a.Has(1) ? a.Get(1).Str() : "key";
  if (by != "key" && by != "value") return absl::InvalidArgumentError("You can only sort by either \"key\" or \"value\"");
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [key, value] : v.AsDict().items) {
    LOOM_ASSIGN_OR_RETURN(Value sort_key, SortKey(by == "key" ? key : value, Value(), a.Bool(0, false)));
    keyed.emplace_back(std::move(sort_key), Value::Tuple({key, value}));
  }
  LOOM_RETURN_IF_ERROR(SortValues(keyed, a.Bool(2, false)));
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Unique(const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("unique", args, {"case_sensitive", "attribute"}));
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  ValueList out;
  ValueList seen;
  for (Value& item : items) {
    LOOM_ASSIGN_OR_RETURN(Value key, SortKey(item, a.Get(1), a.Bool(0, false)));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(std::move(item));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> SelectReject(Interpreter& interp, std::string_view name, const Value& v, CallArgs& args) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool select = name == "select" || name == "selectattr";
  if (!v.Truthy()) return Value::List({});  // jinja2 checks `if value:` before iterating
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (args.args.empty()) return absl::InvalidArgumentError(StrCat(name, "() needs an attribute"));
    attribute = args.args[next++];
  }
  std::string test;
  if (next < args.args.size()) test = args.args[next++].Str();
  CallArgs test_args;
  test_args.args.assign(args.args.begin() + next, args.args.end());
  test_args.kwargs = args.kwargs;
  ValueList out;
  for (Value& item : items) {
    Value subject = item;
    if (by_attr) {
      LOOM_ASSIGN_OR_RETURN(subject, GetPath(item, attribute));
    }
    bool pass = subject.Truthy();
    if (!test.empty()) {
      CallArgs copy = test_args;
      LOOM_ASSIGN_OR_RETURN(pass, ApplyTest(interp, test, subject, copy));
    }
    if (pass == select) out.push_back(std::move(item));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Map(Interpreter& interp, const Value& v, CallArgs& args) {
  if (!v.Truthy()) return Value::List({});  // jinja2 checks `if value:` before iterating
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  ValueList out;
  Value attribute;
  Value fallback;
  bool by_attr = false;
  for (const auto& [key, value] : args.kwargs) {
    if (key == "attribute") {
      attribute = value;
      by_attr = true;
    } else if (key == "default") {
      fallback = value;
    }
  }
  if (by_attr) {
    for (const Value& item : items) {
      LOOM_ASSIGN_OR_RETURN(Value got, GetPath(item, attribute));
      out.push_back(got.IsUndefined() && !fallback.IsUndefined() ? fallback : got);
    }
    return Value::List(std::move(out));
  }
  if (args.args.empty()) return absl::InvalidArgumentError("map requires a filter argument");
  const std::string filter = args.args[0].Str();
  for (const Value& item : items) {
    CallArgs filter_args;
    filter_args.args.assign(args.args.begin() + 1, args.args.end());
    filter_args.kwargs = args.kwargs;
    LOOM_ASSIGN_OR_RETURN(Value got, ApplyFilter(interp, filter, item, filter_args));
    out.push_back(std::move(got));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Join(Interpreter& interp, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("join", args, {"d", "attribute"}));
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  const std::string sep = a.Has(0) ? a.Get(0).Str() : "";
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (a.Has(1) && !a.Get(1).IsNone()) {
      LOOM_ASSIGN_OR_RETURN(item, GetPath(item, a.Get(1)));
    }
    if (i > 0) out += sep;
    out += item.Str();
    LOOM_RETURN_IF_ERROR(interp.CheckSize(out.size()));
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> MinMax(const Value& v, CallArgs& args, bool want_max) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  LOOM_ASSIGN_OR_RETURN(Value best_key, SortKey(items[0], a.Get(1), a.Bool(0, false)));
  for (size_t i = 1; i < items.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Value key, SortKey(items[i], a.Get(1), a.Bool(0, false)));
    LOOM_ASSIGN_OR_RETURN(bool better, want_max ? LessThan(best_key, key) : LessThan(key, best_key));
    if (better) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

absl::StatusOr<Value> Sum(Interpreter& interp, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("sum", args, {"attribute", "start"}));
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  Value total = a.Get(1, Value::Int(0));
  for (const Value& item : items) {
    Value x = item;
    if (a.Has(0) && !a.Get(0).IsNone()) {
      LOOM_ASSIGN_OR_RETURN(x, GetPath(item, a.Get(0)));
    }
    LOOM_ASSIGN_OR_RETURN(total, BinaryOp(interp, "+", total, x));
  }
  return total;
}

absl::StatusOr<Value> Batch(Interpreter& interp, const Value& v, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("batch", args, {"linecount", "fill_with"}));
  LOOM_ASSIGN_OR_RETURN(int64_t n, a.Int(0, 0));
  if (n <= 0) return absl::InvalidArgumentError("batch: linecount must be positive");
  if (n > interp.options().max_range) return absl::InvalidArgumentError("batch: linecount too large");
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  ValueList out;
  ValueList current;
  for (Value& item : items) {
    current.push_back(std::move(item));
    if (static_cast<int64_t>(current.size()) == n) {
      out.push_back(Value::List(std::move(current)));
      current.clear();
    }
  }
  if (!current.empty()) {
    if (a.Has(1)) {
      while (static_cast<int64_t>(current.size()) < n) current.push_back(a.Get(1));
    }
    out.push_back(Value::List(std::move(current)));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FirstLast(const Value& v, bool first) {
  if (v.IsDict() && !v.IsNamespace()) {
    const auto& items = v.AsDict().items;
    if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
    return first ? items.front().first : items.back().first;
  }
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  if (items.empty()) return Value::Undefined(first ? "No first item, sequence was empty." : "No last item, sequence was empty.");
  return first ? items.front() : items.back();
}

absl::StatusOr<Value> Reverse(const Value& v) {
  if (v.IsString()) {
    std::vector<std::string> cps = CodePoints(v.AsString());
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value::String(std::move(out));
  }
  LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

absl::StatusOr<Value> Items(const Value& v) {
  if (v.IsUndefined()) return Value::List({});
  if (!v.IsDict() || v.IsNamespace()) return absl::InvalidArgumentError("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [key, value] : v.AsDict().items) out.push_back(Value::Tuple({key, value}));
  return Value::List(std::move(out));
}

}  // namespace

absl::StatusOr<Value> FilterSequence(Interpreter& interp, std::string_view name, const Value& v,
                                     CallArgs& args, bool* handled) {
  *handled = true;
  // An undefined operand iterates as empty, as jinja2's Undefined does.
  if (name == "items") return Items(v);
  if (name == "first" || name == "last") return FirstLast(v, name == "first");
  if (name == "join") return Join(interp, v, args);
  if (name == "list") {
    LOOM_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
    return Value::List(std::move(items));
  }
  if (name == "map") return Map(interp, v, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return SelectReject(interp, name, v, args);
  }
  if (name == "sort") return Sort(v, args);
  if (name == "dictsort") return DictSort(v, args);
  if (name == "unique") return Unique(v, args);
  if (name == "reverse") return Reverse(v);
  if (name == "batch") return Batch(interp, v, args);
  if (name == "sum") return Sum(interp, v, args);
  if (name == "min" || name == "max") return MinMax(v, args, name == "max");
  *handled = false;
  return Value();
}

}  // namespace loom::text::jinja
