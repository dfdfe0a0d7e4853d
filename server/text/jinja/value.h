// The value model of the Jinja interpreter: what template expressions evaluate to.
//
// Values mirror the Python objects a Hugging Face chat template sees: None, bool, int, float, str,
// list, tuple, dict (insertion-ordered, as Python dicts are), callables (macros, globals, bound
// methods) and jinja2's Undefined. Strings are UTF-8. Lists, tuples and dicts are shared and
// immutable once built, except a namespace (a dict whose attributes `{% set ns.x = %}` assigns),
// so copying a Value is cheap. A Value is not thread-safe to mutate; values built by one render
// stay inside that render.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace loom::text::jinja {

class Value;
class Callable;
struct Dict;
using ValueList = std::vector<Value>;

// One template value. The default value is Undefined.
class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kCallable,
  };

  Value() = default;
  // Factories. `Undefined` takes the message a later failing use reports (e.g. "'x' is
  // undefined"); lists, tuples and dicts take ownership of their items.
  static Value Undefined(std::string name = {});
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value List(ValueList items);
  static Value Tuple(ValueList items);
  static Value FromDict(std::shared_ptr<Dict> dict);
  static Value EmptyDict();
  static Value Function(std::shared_ptr<const Callable> fn);
  // A list that Python would print differently: a dict view (`dict_items([...])`) or a range
  // (`range(0, 3)`); `repr` is the wrapper name ("dict_items") or, for a range, the whole text.
  // Such views iterate like lists but are not JSON serializable.
  static Value View(ValueList items, std::string repr, bool is_range);

  // Type queries.
  Kind kind() const { return kind_; }
  bool IsUndefined() const { return kind_ == Kind::kUndefined; }
  bool IsNone() const { return kind_ == Kind::kNone; }
  bool IsBool() const { return kind_ == Kind::kBool; }
  bool IsInt() const { return kind_ == Kind::kInt; }
  bool IsFloat() const { return kind_ == Kind::kFloat; }
  // int, float or bool (Python's bool is an int).
  bool IsNumber() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool IsString() const { return kind_ == Kind::kString; }
  bool IsList() const { return kind_ == Kind::kList; }
  bool IsTuple() const { return kind_ == Kind::kTuple; }
  bool IsSequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool IsDict() const { return kind_ == Kind::kDict; }
  bool IsNamespace() const;
  bool IsCallable() const { return kind_ == Kind::kCallable; }
  // True for dict views and ranges (see View).
  bool IsView() const { return kind_ == Kind::kList && string_ != nullptr; }

  // Payload accessors; each requires the matching kind (AsInt/AsDouble accept any number).
  bool AsBool() const { return bool_; }
  int64_t AsInt() const { return kind_ == Kind::kFloat ? static_cast<int64_t>(float_) : int_; }
  double AsDouble() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& AsString() const { return *string_; }
  const std::string& view_repr() const { return *string_; }
  const ValueList& AsList() const { return *list_; }
  const Dict& AsDict() const { return *dict_; }
  // Namespaces are the one mutable container (`{% set ns.x = ... %}`).
  Dict& MutableDict() const { return *dict_; }
  const std::shared_ptr<Dict>& dict_ptr() const { return dict_; }
  const Callable& AsCallable() const { return *callable_; }
  // The name an Undefined was looked up under (for messages), e.g. "foo" or "attribute 'x'".
  const std::string& undefined_name() const;

  // Nesting depth of lists, tuples and dicts (0 for scalars), as of construction: a namespace
  // mutated later keeps the depth it was created with.
  int depth() const { return depth_; }

  // The value with any view tag dropped (a plain list).
  Value Plain() const { return IsView() ? List(AsList()) : *this; }

  // Python truthiness.
  bool Truthy() const;
  // Python `str(x)`: strings as-is, None as "None", True/False, floats like repr, containers
  // like repr. Undefined prints as "".
  std::string Str() const;
  // Python `repr(x)`.
  std::string Repr() const;
  // Python `==` (1 == 1.0 == True; lists and dicts compare element-wise).
  bool Equals(const Value& other) const;
  // A string identifying the value for use as a dict key (equal keys give equal strings).
  std::string KeyString() const;
  // Name of the Python type, for messages ("str", "int", "dict", ...).
  std::string_view TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;  // for a view: whether it is a range
  int depth_ = 0;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> callable_;
};

// An insertion-ordered dict. Keys are Values (strings in practice); lookup hashes KeyString().
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  absl::flat_hash_map<std::string, size_t> index;
  bool is_namespace = false;

  // The value under `key`, or nullptr.
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Inserts or replaces (a replaced key keeps its position, as in Python).
  void Set(Value key, Value value);
  size_t size() const { return items.size(); }
};

// Positional and keyword arguments of a call.
struct CallArgs {
  ValueList args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

class Interpreter;

// Anything a template can call: globals (range, namespace, raise_exception, ...), macros, bound
// string/list/dict methods, loop.cycle.
class Callable {
 public:
  virtual ~Callable() = default;
  // Calls with `args`; errors are InvalidArgument without a position (the caller adds it).
  virtual absl::StatusOr<Value> Call(Interpreter& interp, CallArgs& args) const = 0;
  // Python-ish name for repr and messages.
  virtual std::string Name() const = 0;
};

// Formats a double as Python's repr does ("1.0", "0.1", "1e+16", "inf", "nan").
std::string FormatPythonFloat(double d);

// Python repr of a string: single quotes unless it contains ' and no ", with escapes.
std::string PythonStringRepr(std::string_view s);

// Deepest nesting accepted when building Values from JSON or printing them.
inline constexpr int kMaxValueDepth = 512;

// Parses JSON text into a Value, keeping object key order and int/float distinct (a number with
// a fraction or exponent is a float, as Python's json module does). InvalidArgument on bad JSON or
// nesting deeper than kMaxValueDepth.
absl::StatusOr<Value> ParseJson(std::string_view text);

// Options of HF's tojson filter (json.dumps with ensure_ascii=False by default).
struct JsonDumpOptions {
  int indent = -1;  // -1: no newlines; >= 0: pretty-print with that many spaces
  std::string indent_string;  // used when set (json.dumps accepts a string indent)
  bool use_indent_string = false;
  std::string item_separator;  // default ", " without indent, "," with indent
  std::string key_separator = ": ";
  bool separators_given = false;
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// Python json.dumps of a value. Fails for Undefined, callables and non-string dict keys that json
// cannot convert, and for nesting deeper than kMaxValueDepth (a namespace may hold itself).
absl::StatusOr<std::string> DumpJson(const Value& value, const JsonDumpOptions& options);

}  // namespace loom::text::jinja
