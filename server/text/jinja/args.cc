#include "server/text/jinja/args.h"

#include "engine/common/strings.h"

namespace loom::text::jinja {

absl::StatusOr<BoundArgs> BoundArgs::Bind(std::string_view function, const CallArgs& args,
                                          std::initializer_list<std::string_view> names) {
  BoundArgs bound;
  bound.function_ = std::string(function);
  bound.names_.assign(names.begin(), names.end());
  bound.values_.resize(names.size());
  if (args.args.size() > names.size()) {
    return absl::InvalidArgumentError(StrCat(function, "() takes at most ", names.size(),
                                             " argument(s) (", args.args.size(), " given)"));
  }
  for (size_t i = 0; i < args.args.size(); ++i) bound.values_[i] = args.args[i];
  for (const auto& [key, value] : args.kwargs) {
    size_t i = 0;
    while (i < bound.names_.size() && bound.names_[i] != key) ++i;
    if (i == bound.names_.size()) {
      return absl::InvalidArgumentError(
          StrCat(function, "() got an unexpected keyword argument '", key, "'"));
    }
    if (bound.values_[i].has_value()) {
      return absl::InvalidArgumentError(
          StrCat(function, "() got multiple values for argument '", key, "'"));
    }
    bound.values_[i] = value;
  }
  return bound;
}

Value BoundArgs::Get(size_t i, const Value& fallback) const {
  return values_[i].has_value() ? *values_[i] : fallback;
}

absl::StatusOr<std::optional<std::string>> BoundArgs::OptString(size_t i) const {
  if (!Has(i) || values_[i]->IsNone()) return std::optional<std::string>();
  if (!values_[i]->IsString()) {
    return absl::InvalidArgumentError(StrCat(function_, "() argument '", names_[i],
                                             "' must be str, not ", values_[i]->TypeName()));
  }
  return std::optional<std::string>(values_[i]->AsString());
}

absl::StatusOr<int64_t> BoundArgs::Int(size_t i, int64_t fallback) const {
  if (!Has(i) || values_[i]->IsNone()) return fallback;
  if (!values_[i]->IsNumber() || values_[i]->IsFloat()) {
    return absl::InvalidArgumentError(StrCat(function_, "() argument '", names_[i],
                                             "' must be an integer, not ", values_[i]->TypeName()));
  }
  return values_[i]->AsInt();
}

bool BoundArgs::Bool(size_t i, bool fallback) const {
  if (!Has(i)) return fallback;
  return values_[i]->Truthy();
}

}  // namespace loom::text::jinja
