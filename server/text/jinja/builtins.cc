// Global functions of HF's chat-template environment: jinja2's range, namespace and dict, and
// HF's raise_exception and strftime_now.

#include <ctime>

#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/jinja/args.h"
#include "server/text/jinja/interpreter.h"

namespace loom::text::jinja {
namespace {

using Fn = absl::StatusOr<Value> (*)(Interpreter&, CallArgs&);

class BuiltinCallable : public Callable {
 public:
  BuiltinCallable(std::string name, Fn fn) : name_(std::move(name)), fn_(fn) {}
  absl::StatusOr<Value> Call(Interpreter& interp, CallArgs& args) const override {
    return fn_(interp, args);
  }
  std::string Name() const override { return name_; }

 private:
  std::string name_;
  Fn fn_;
};

absl::StatusOr<Value> Range(Interpreter& interp, CallArgs& args) {
  if (!args.kwargs.empty()) return absl::InvalidArgumentError("range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3) {
    return absl::InvalidArgumentError("range expected 1 to 3 arguments");
  }
  int64_t bounds[3] = {0, 0, 1};
  for (size_t i = 0; i < args.args.size(); ++i) {
    const Value& v = args.args[i];
    if (!v.IsNumber() || v.IsFloat()) {
      return absl::InvalidArgumentError(
          StrCat("'", v.TypeName(), "' object cannot be interpreted as an integer"));
    }
  }
  if (args.args.size() == 1) {
    bounds[1] = args.args[0].AsInt();
  } else {
    bounds[0] = args.args[0].AsInt();
    bounds[1] = args.args[1].AsInt();
    if (args.args.size() == 3) bounds[2] = args.args[2].AsInt();
  }
  const int64_t start = bounds[0], stop = bounds[1], step = bounds[2];
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 abs_step = step > 0 ? step : -static_cast<__int128>(step);
  const __int128 count = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  if (count > interp.options().max_range) {
    return absl::InvalidArgumentError(
        StrCat("range() of ", static_cast<int64_t>(count > INT64_MAX ? INT64_MAX : count),
               " items exceeds the limit of ", interp.options().max_range));
  }
  ValueList out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) out.push_back(Value::Int(start + i * step));
  return Value::View(std::move(out),
                     step == 1 ? StrCat("range(", start, ", ", stop, ")")
                               : StrCat("range(", start, ", ", stop, ", ", step, ")"),
                     true);
}

// dict(mapping_or_pairs?, **kwargs), shared by namespace().
absl::StatusOr<std::shared_ptr<Dict>> BuildDict(std::string_view function, const CallArgs& args) {
  auto dict = std::make_shared<Dict>();
  if (args.args.size() > 1) {
    return absl::InvalidArgumentError(StrCat(function, " expected at most 1 argument"));
  }
  if (args.args.size() == 1) {
    const Value& init = args.args[0];
    if (init.IsDict() && !init.IsNamespace()) {
      for (const auto& [key, value] : init.AsDict().items) dict->Set(key, value);
    } else if (init.IsSequence()) {
      for (const Value& pair : init.AsList()) {
        if (!pair.IsSequence() || pair.AsList().size() != 2) {
          return absl::InvalidArgumentError(StrCat(function, ": sequence elements must be pairs"));
        }
        dict->Set(pair.AsList()[0], pair.AsList()[1]);
      }
    } else {
      return absl::InvalidArgumentError(StrCat("'", init.TypeName(), "' object is not iterable"));
    }
  }
  for (const auto& [key, value] : args.kwargs) dict->Set(Value::String(key), value);
  return dict;
}

absl::StatusOr<Value> MakeDict(Interpreter&, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<Dict> dict, BuildDict("dict", args));
  return Value::FromDict(std::move(dict));
}

absl::StatusOr<Value> MakeNamespace(Interpreter& interp, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<Dict> dict, BuildDict("namespace", args));
  dict->is_namespace = true;
  interp.TrackNamespace(dict);
  return Value::FromDict(std::move(dict));
}

absl::StatusOr<Value> RaiseException(Interpreter&, CallArgs& args) {
  std::string message = args.args.empty() ? std::string() : args.args[0].Str();
  return absl::InvalidArgumentError(message);
}

absl::StatusOr<Value> StrftimeNow(Interpreter& interp, CallArgs& args) {
  LOOM_ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("strftime_now", args, {"format"}));
  LOOM_ASSIGN_OR_RETURN(std::optional<std::string> format, a.OptString(0));
  if (!format) return absl::InvalidArgumentError("strftime_now() needs a format string");
  const time_t now = static_cast<time_t>(interp.options().now_unix_seconds);
  std::tm tm{};
  gmtime_r(&now, &tm);
  if (format->empty()) return Value::String("");
  std::string buf(format->size() * 8 + 64, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), format->c_str(), &tm);
  if (n == 0) return absl::InvalidArgumentError("strftime_now: format produced no output or too much");
  buf.resize(n);
  return Value::String(std::move(buf));
}

}  // namespace

void AddGlobals(Frame& frame) {
  const std::pair<const char*, Fn> globals[] = {
      {"range", Range},
      {"dict", MakeDict},
      {"namespace", MakeNamespace},
      {"raise_exception", RaiseException},
      {"strftime_now", StrftimeNow},
  };
  for (const auto& [name, fn] : globals) {
    frame.vars[name] = Value::Function(std::make_shared<BuiltinCallable>(name, fn));
  }
}

}  // namespace loom::text::jinja
