#include "engine/common/json_writer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/common/utf8.h"

namespace loom {

void AppendJsonString(std::string_view value, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < value.size();) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out->append("\\\""); break;
        case '\\': out->append("\\\\"); break;
        case '\n': out->append("\\n"); break;
        case '\r': out->append("\\r"); break;
        case '\t': out->append("\\t"); break;
        case '\b': out->append("\\b"); break;
        case '\f': out->append("\\f"); break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out->append(buf);
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    size_t len = 0;
    AppendUtf8(DecodeUtf8(value, i, &len), out);  // ill-formed bytes become U+FFFD
    i += len;
  }
  out->push_back('"');
}

std::string JsonQuote(std::string_view value) {
  std::string out;
  out.reserve(value.size() + 2);
  AppendJsonString(value, &out);
  return out;
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_element_.empty()) {
    if (has_element_.back()) out_.push_back(',');
    has_element_.back() = true;
  }
}

void JsonWriter::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  has_element_.push_back(false);
}

void JsonWriter::EndObject() {
  out_.push_back('}');
  has_element_.pop_back();
}

void JsonWriter::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  has_element_.push_back(false);
}

void JsonWriter::EndArray() {
  out_.push_back(']');
  has_element_.pop_back();
}

void JsonWriter::Key(std::string_view key) {
  BeforeValue();
  AppendJsonString(key, &out_);
  out_.push_back(':');
  after_key_ = true;
}

void JsonWriter::String(std::string_view value) {
  BeforeValue();
  AppendJsonString(value, &out_);
}

void JsonWriter::Int(int64_t value) {
  BeforeValue();
  out_.append(std::to_string(value));
}

void JsonWriter::Uint(uint64_t value) {
  BeforeValue();
  out_.append(std::to_string(value));
}

void JsonWriter::Double(double value) {
  BeforeValue();
  if (!std::isfinite(value)) {
    out_.append("null");
    return;
  }
  char buf[32];
  // Shortest form that reads back to the same double.
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  out_.append(buf);
}

void JsonWriter::Bool(bool value) {
  BeforeValue();
  out_.append(value ? "true" : "false");
}

void JsonWriter::Null() {
  BeforeValue();
  out_.append("null");
}

void JsonWriter::Raw(std::string_view json) {
  BeforeValue();
  out_.append(json);
}

}  // namespace loom
