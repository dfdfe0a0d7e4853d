// A streaming JSON writer for responses (OpenAI bodies, SSE events, metrics-free status pages):
// no document tree, no exceptions, output appended to one string.
//
//   JsonWriter w;
//   w.BeginObject();
//   w.Key("id"); w.String(id);
//   w.Key("choices"); w.BeginArray(); ... w.EndArray();
//   w.EndObject();
//   std::string body = std::move(w).Take();
//
// Strings are escaped per RFC 8259; ill-formed UTF-8 is written as U+FFFD (engine/common/utf8.h),
// so the output is always valid JSON. Non-finite doubles are written as null. Commas are placed
// automatically; the caller keeps keys and values alternating inside objects. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

class JsonWriter {
 public:
  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  void Key(std::string_view key);
  void String(std::string_view value);
  void Int(int64_t value);
  void Uint(uint64_t value);
  void Double(double value);
  void Bool(bool value);
  void Null();
  // Inserts already-serialized JSON as one value (the caller vouches for it).
  void Raw(std::string_view json);

  const std::string& str() const { return out_; }
  std::string Take() && { return std::move(out_); }

 private:
  void BeforeValue();

  std::string out_;
  // Per open container: whether it already holds an element.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

// `value` as a JSON string literal, quotes included.
std::string JsonQuote(std::string_view value);
// Appends the JSON string literal of `value` to *out.
void AppendJsonString(std::string_view value, std::string* out);

}  // namespace loom
