// Read-only JSON for files loom reads (config.json, safetensors headers, index files, loom
// configs): parse once, then walk with accessors that return absl::Status instead of throwing.
//
// This is the one wrapper around nlohmann/json for code built without exceptions. A `Json` is a
// cheap handle (a shared document plus a node pointer); copies share the parsed document, which
// stays alive as long as any handle to it does. Thread-safe for concurrent readers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/statusor.h"

namespace loom {

// Deepest nesting of arrays and objects Parse accepts. Deeper input is refused, so no walk of a
// parsed document (Dump, destruction) can exhaust the stack on hostile input.
inline constexpr int kMaxJsonDepth = 1000;

class Json {
 public:
  // Parses `text`; a syntax error names its 0-based byte offset. `what` names the source in
  // messages.
  static absl::StatusOr<Json> Parse(std::string_view text, std::string_view what = "JSON");

  bool IsNull() const;
  bool IsObject() const;
  bool IsArray() const;
  bool IsString() const;
  bool IsNumber() const;
  bool IsInteger() const;  // a number with no fractional part
  bool IsBool() const;

  // Object members. `Get` fails when the key is missing or this is not an object.
  bool Has(std::string_view key) const;
  std::optional<Json> Find(std::string_view key) const;
  absl::StatusOr<Json> Get(std::string_view key) const;
  // Member names and values, sorted by name (empty unless an object).
  std::vector<std::pair<std::string, Json>> Items() const;

  // Array elements (empty unless an array). An index past the end, or into something that is not
  // an array, gives a null node whose path names the index.
  size_t size() const;
  Json operator[](size_t index) const;

  absl::StatusOr<int64_t> AsInt() const;  // integers, and floats with an integral value
  absl::StatusOr<double> AsDouble() const;
  absl::StatusOr<std::string> AsString() const;
  absl::StatusOr<bool> AsBool() const;

  // Convenience for optional object members: the default when the key is missing or null, an
  // error when present with the wrong type.
  absl::StatusOr<int64_t> GetInt(std::string_view key, std::optional<int64_t> fallback = {}) const;
  absl::StatusOr<double> GetDouble(std::string_view key, std::optional<double> fallback = {}) const;
  absl::StatusOr<std::string> GetString(std::string_view key,
                                        std::optional<std::string> fallback = {}) const;
  absl::StatusOr<bool> GetBool(std::string_view key, std::optional<bool> fallback = {}) const;

  // Compact serialisation of this node.
  std::string Dump() const;

  // Path of this node from the document root, e.g. `rope_scaling.factor`, for messages.
  const std::string& path() const { return path_; }

 private:
  Json(std::shared_ptr<const nlohmann::json> doc, const nlohmann::json* node, std::string path)
      : doc_(std::move(doc)), node_(node), path_(std::move(path)) {}
  Json Child(const nlohmann::json* node, std::string_view key) const;
  std::string KindName() const;

  std::shared_ptr<const nlohmann::json> doc_;
  const nlohmann::json* node_ = nullptr;
  std::string path_;
};

}  // namespace loom
