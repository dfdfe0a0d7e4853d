// Python-style binding of call arguments to named parameters, for builtin filters, tests,
// methods and globals.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/text/jinja/value.h"

namespace loom::text::jinja {

// The arguments of one call, by parameter position.
class BoundArgs {
 public:
  // Binds `args` to `names` in order (positional first, then keywords by name). Too many
  // positional arguments, unknown or repeated keywords are InvalidArgument naming `function`.
  static absl::StatusOr<BoundArgs> Bind(std::string_view function, const CallArgs& args,
                                        std::initializer_list<std::string_view> names);

  bool Has(size_t i) const { return values_[i].has_value(); }
  // The i-th parameter, or `fallback` when not given.
  Value Get(size_t i, const Value& fallback = Value()) const;
  // Typed accessors: the given value converted, the fallback when not given (or None), an error
  // naming the parameter for a value of the wrong type.
  absl::StatusOr<std::optional<std::string>> OptString(size_t i) const;
  absl::StatusOr<int64_t> Int(size_t i, int64_t fallback) const;
  bool Bool(size_t i, bool fallback) const;

 private:
  std::string function_;
  std::vector<std::string_view> names_;
  std::vector<std::optional<Value>> values_;
};

}  // namespace loom::text::jinja
