#include "engine/common/json.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "engine/common/strings.h"

namespace loom {
namespace {

std::string Where(const std::string& path) { return path.empty() ? "<root>" : path; }

// Offset of the bracket that opens a level deeper than kMaxJsonDepth, or -1. Brackets inside
// strings do not count; malformed input is left to the parser.
int64_t FindTooDeep(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return static_cast<int64_t>(i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return -1;
}

}  // namespace

absl::StatusOr<Json> Json::Parse(std::string_view text, std::string_view what) {
  if (const int64_t offset = FindTooDeep(text); offset >= 0) {
    return absl::InvalidArgumentError(StrCat(what, ": invalid JSON at byte offset ", offset,
                                             ": nested deeper than ", kMaxJsonDepth, " levels"));
  }
  auto doc = std::make_shared<nlohmann::json>();
  try {
    *doc = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts the bytes read, the failing one included: the offset is one less.
    const size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    return absl::InvalidArgumentError(
        StrCat(what, ": invalid JSON at byte offset ", offset, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(StrCat(what, ": invalid JSON: ", e.what()));
  }
  const nlohmann::json* root = doc.get();
  return Json(std::move(doc), root, "");
}

bool Json::IsNull() const { return node_->is_null(); }
bool Json::IsObject() const { return node_->is_object(); }
bool Json::IsArray() const { return node_->is_array(); }
bool Json::IsString() const { return node_->is_string(); }
bool Json::IsNumber() const { return node_->is_number(); }
bool Json::IsBool() const { return node_->is_boolean(); }
bool Json::IsInteger() const {
  if (node_->is_number_integer()) return true;
  if (!node_->is_number_float()) return false;
  const double v = node_->get<double>();
  return std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 9.2e18;
}

Json Json::Child(const nlohmann::json* node, std::string_view key) const {
  return Json(doc_, node, path_.empty() ? std::string(key) : StrCat(path_, ".", key));
}

std::string Json::KindName() const {
  if (IsNull()) return "null";
  if (IsObject()) return "an object";
  if (IsArray()) return "an array";
  if (IsString()) return "a string";
  if (IsBool()) return "a boolean";
  if (IsNumber()) return "a number";
  return "a value";
}

bool Json::Has(std::string_view key) const {
  return node_->is_object() && node_->find(key) != node_->end();
}

std::optional<Json> Json::Find(std::string_view key) const {
  if (!node_->is_object()) return std::nullopt;
  auto it = node_->find(key);
  if (it == node_->end()) return std::nullopt;
  return Child(&*it, key);
}

absl::StatusOr<Json> Json::Get(std::string_view key) const {
  if (!node_->is_object()) {
    return absl::InvalidArgumentError(
        StrCat(Where(path_), " is ", KindName(), ", expected an object"));
  }
  std::optional<Json> found = Find(key);
  if (!found) {
    return absl::NotFoundError(StrCat("missing key '",
                                            path_.empty() ? std::string(key)
                                                          : StrCat(path_, ".", key),
                                            "'"));
  }
  return *found;
}

std::vector<std::pair<std::string, Json>> Json::Items() const {
  std::vector<std::pair<std::string, Json>> out;
  if (!node_->is_object()) return out;
  for (auto it = node_->begin(); it != node_->end(); ++it) {
    out.emplace_back(it.key(), Child(&it.value(), it.key()));
  }
  return out;
}

size_t Json::size() const { return node_->is_array() ? node_->size() : 0; }

Json Json::operator[](size_t index) const {
  static const nlohmann::json* const kNull = new nlohmann::json();
  const bool inside = node_->is_array() && index < node_->size();
  return Json(doc_, inside ? &(*node_)[index] : kNull, StrCat(path_, "[", index, "]"));
}

absl::StatusOr<int64_t> Json::AsInt() const {
  if (node_->is_number_unsigned()) {
    const uint64_t v = node_->get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) {
      return absl::OutOfRangeError(StrCat(Where(path_), " is too large"));
    }
    return static_cast<int64_t>(v);
  }
  if (node_->is_number_integer()) return node_->get<int64_t>();
  if (IsInteger()) return static_cast<int64_t>(node_->get<double>());
  return absl::InvalidArgumentError(
      StrCat(Where(path_), " is ", KindName(), ", expected an integer"));
}

absl::StatusOr<double> Json::AsDouble() const {
  if (!node_->is_number()) {
    return absl::InvalidArgumentError(
        StrCat(Where(path_), " is ", KindName(), ", expected a number"));
  }
  return node_->get<double>();
}

absl::StatusOr<std::string> Json::AsString() const {
  if (!node_->is_string()) {
    return absl::InvalidArgumentError(
        StrCat(Where(path_), " is ", KindName(), ", expected a string"));
  }
  return node_->get<std::string>();
}

absl::StatusOr<bool> Json::AsBool() const {
  if (!node_->is_boolean()) {
    return absl::InvalidArgumentError(
        StrCat(Where(path_), " is ", KindName(), ", expected a boolean"));
  }
  return node_->get<bool>();
}

namespace {

// Shared shape of the Get<Type> helpers: missing or null gives the fallback; without one,
// missing is Get's error and null is the conversion's ("<path> is null, expected ...").
template <typename T, typename Convert>
absl::StatusOr<T> GetOr(const Json& json, std::string_view key, const std::optional<T>& fallback,
                        Convert convert) {
  std::optional<Json> found = json.Find(key);
  if (!found || found->IsNull()) {
    if (fallback) return *fallback;
    if (!found) return json.Get(key).status();
  }
  return convert(*found);
}

}  // namespace

absl::StatusOr<int64_t> Json::GetInt(std::string_view key, std::optional<int64_t> fallback) const {
  return GetOr<int64_t>(*this, key, fallback, [](const Json& j) { return j.AsInt(); });
}
absl::StatusOr<double> Json::GetDouble(std::string_view key, std::optional<double> fallback) const {
  return GetOr<double>(*this, key, fallback, [](const Json& j) { return j.AsDouble(); });
}
absl::StatusOr<std::string> Json::GetString(std::string_view key,
                                            std::optional<std::string> fallback) const {
  return GetOr<std::string>(*this, key, fallback, [](const Json& j) { return j.AsString(); });
}
absl::StatusOr<bool> Json::GetBool(std::string_view key, std::optional<bool> fallback) const {
  return GetOr<bool>(*this, key, fallback, [](const Json& j) { return j.AsBool(); });
}

std::string Json::Dump() const { return node_->dump(); }

}  // namespace loom
