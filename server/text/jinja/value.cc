#include "server/text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/common/strings.h"
#include "engine/common/utf8.h"

namespace loom::text::jinja {
namespace {

constexpr size_t kMaxReprBytes = size_t{64} << 20;

const std::string& EmptyString() {
  static const std::string* const kEmpty = new std::string();
  return *kEmpty;
}

bool IsPrintable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp >= 0x80 && cp <= 0xA0) return false;
  if (cp == 0xAD) return false;
  if (cp >= 0x2028 && cp <= 0x2029) return false;
  if (cp >= 0xD800 && cp <= 0xDFFF) return false;
  return true;
}

void AppendRepr(const Value& v, std::string& out, int depth);

void AppendSequenceRepr(const Value& v, std::string& out, int depth) {
  if (v.IsView()) {
    if (v.AsBool()) {
      out.append(v.view_repr());
      return;
    }
    out.append(v.view_repr());
    out.push_back('(');
    AppendSequenceRepr(Value::List(v.AsList()), out, depth);
    out.push_back(')');
    return;
  }
  const bool tuple = v.IsTuple();
  out.push_back(tuple ? '(' : '[');
  const ValueList& items = v.AsList();
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.append(", ");
    AppendRepr(items[i], out, depth + 1);
  }
  if (tuple && items.size() == 1) out.push_back(',');
  out.push_back(tuple ? ')' : ']');
}

void AppendRepr(const Value& v, std::string& out, int depth) {
  // A namespace may contain itself (several times): stop early instead of growing without bound.
  if (out.size() > kMaxReprBytes) return;
  if (depth > kMaxValueDepth) {
    out.append("...");
    return;
  }
  switch (v.kind()) {
    case Value::Kind::kString:
      out.append(PythonStringRepr(v.AsString()));
      return;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      AppendSequenceRepr(v, out, depth);
      return;
    case Value::Kind::kDict: {
      if (v.IsNamespace()) out.append("<Namespace ");
      out.push_back('{');
      bool first = true;
      for (const auto& [key, value] : v.AsDict().items) {
        if (!first) out.append(", ");
        first = false;
        AppendRepr(key, out, depth + 1);
        out.append(": ");
        AppendRepr(value, out, depth + 1);
      }
      out.push_back('}');
      if (v.IsNamespace()) out.push_back('>');
      return;
    }
    case Value::Kind::kUndefined:
      out.append("Undefined");
      return;
    default:
      out.append(v.Str());
  }
}

}  // namespace

Value Value::Undefined(std::string name) {
  Value v;
  if (!name.empty()) v.string_ = std::make_shared<const std::string>(std::move(name));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  v.int_ = b ? 1 : 0;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}
Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = d;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.string_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  for (const Value& item : items) v.depth_ = std::max(v.depth_, item.depth_);
  ++v.depth_;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}
Value Value::View(ValueList items, std::string repr, bool is_range) {
  Value v = List(std::move(items));
  v.string_ = std::make_shared<const std::string>(std::move(repr));
  v.bool_ = is_range;
  return v;
}
Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}
Value Value::FromDict(std::shared_ptr<Dict> dict) {
  Value v;
  v.kind_ = Kind::kDict;
  for (const auto& [key, value] : dict->items) v.depth_ = std::max(v.depth_, value.depth_);
  ++v.depth_;
  v.dict_ = std::move(dict);
  return v;
}
Value Value::EmptyDict() { return FromDict(std::make_shared<Dict>()); }
Value Value::Function(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::move(fn);
  return v;
}

bool Value::IsNamespace() const { return kind_ == Kind::kDict && dict_->is_namespace; }

const std::string& Value::undefined_name() const {
  return kind_ == Kind::kUndefined && string_ ? *string_ : EmptyString();
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return bool_;
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0.0;
    case Kind::kString:
      return !string_->empty();
    case Kind::kList:
    case Kind::kTuple:
      return !list_->empty();
    case Kind::kDict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return bool_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return FormatPythonFloat(float_);
    case Kind::kString:
      return *string_;
    case Kind::kCallable:
      return StrCat("<function ", callable_->Name(), ">");
    default: {
      std::string out;
      AppendRepr(*this, out, 0);
      return out;
    }
  }
}

std::string Value::Repr() const {
  std::string out;
  AppendRepr(*this, out, 0);
  return out;
}

bool Value::Equals(const Value& other) const {
  if (IsNumber() && other.IsNumber()) {
    if (kind_ == Kind::kFloat || other.kind_ == Kind::kFloat) return AsDouble() == other.AsDouble();
    return int_ == other.int_;
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return *string_ == *other.string_;
    case Kind::kList:
    case Kind::kTuple: {
      if (list_ == other.list_) return true;
      if (list_->size() != other.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*other.list_)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_ == other.dict_) return true;
      if (dict_->is_namespace || other.dict_->is_namespace) return false;
      if (dict_->size() != other.dict_->size()) return false;
      for (const auto& [key, value] : dict_->items) {
        const Value* found = other.dict_->Find(key);
        if (found == nullptr || !found->Equals(value)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return callable_ == other.callable_;
    default:
      return false;
  }
}

std::string Value::KeyString() const {
  switch (kind_) {
    case Kind::kString:
      return StrCat("s", *string_);
    case Kind::kBool:
    case Kind::kInt:
      return StrCat("n", int_);
    case Kind::kFloat:
      if (std::floor(float_) == float_ && std::fabs(float_) < 9e18) {
        return StrCat("n", static_cast<int64_t>(float_));
      }
      return StrCat("f", FormatPythonFloat(float_));
    default:
      return StrCat("o", Repr());
  }
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return IsView() ? (bool_ ? "range" : "dict_view") : "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return IsNamespace() ? "Namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "object";
}

const Value* Dict::Find(const Value& key) const {
  auto it = index.find(key.KeyString());
  return it == index.end() ? nullptr : &items[it->second].second;
}

const Value* Dict::Find(std::string_view key) const {
  auto it = index.find(StrCat("s", key));
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Dict::Set(Value key, Value value) {
  auto [it, inserted] = index.try_emplace(key.KeyString(), items.size());
  if (inserted) {
    items.emplace_back(std::move(key), std::move(value));
  } else {
    items[it->second].second = std::move(value);
  }
}

std::string FormatPythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's repr layout: scientific when the decimal exponent
  // is < -4 or >= 16, fixed otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign;
    out.append(digits, 0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp_buf;
  }
  std::string out = sign;
  if (exponent < 0) {
    out.append("0.").append(static_cast<size_t>(-exponent - 1), '0').append(digits);
  } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
    out.append(digits).append(exponent + 1 - digits.size(), '0').append(".0");
  } else {
    out.append(digits, 0, exponent + 1).append(".").append(digits, exponent + 1);
  }
  return out;
}

std::string PythonStringRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 1;
    const char32_t cp = DecodeUtf8(s, pos, &len);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out.append("\\n");
    } else if (cp == '\r') {
      out.append("\\r");
    } else if (cp == '\t') {
      out.append("\\t");
    } else if (!IsPrintable(cp)) {
      char buf[16];
      if (cp < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      out.append(buf);
    } else {
      out.append(s.substr(pos, len));
    }
    pos += len;
  }
  out.push_back(quote);
  return out;
}

}  // namespace loom::text::jinja
