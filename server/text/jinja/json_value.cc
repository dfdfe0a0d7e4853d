// JSON text <-> Value: an order-preserving reader on nlohmann's SAX interface (which reports
// errors through the handler instead of throwing) and a writer that matches Python's json.dumps.

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "engine/common/strings.h"
#include "server/text/jinja/value.h"
#include "engine/common/utf8.h"

namespace loom::text::jinja {
namespace {

// Builds Values from SAX events. Open containers live on a stack; a finished one is appended to
// its parent (or becomes the root).
class ValueBuilder {
 public:
  using json = nlohmann::json;
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  bool null() { return Add(Value::None()); }
  bool boolean(bool b) { return Add(Value::Bool(b)); }
  bool number_integer(number_integer_t i) { return Add(Value::Int(i)); }
  bool number_unsigned(number_unsigned_t u) {
    if (u > static_cast<number_unsigned_t>(INT64_MAX)) return Add(Value::Float(static_cast<double>(u)));
    return Add(Value::Int(static_cast<int64_t>(u)));
  }
  bool number_float(number_float_t f, const string_t&) { return Add(Value::Float(f)); }
  bool string(string_t& s) { return Add(Value::String(std::move(s))); }
  bool binary(binary_t&) { return Fail("binary values are not JSON"); }
  bool start_object(std::size_t) { return Open(true); }
  bool key(string_t& k) {
    stack_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(false); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) {
    return Fail(StrCat("invalid JSON at byte ", position));
  }

  const std::string& error() const { return error_; }
  Value& root() { return root_; }

 private:
  struct Frame {
    bool is_object = false;
    ValueList list;
    std::shared_ptr<Dict> dict;
    std::string key;
  };

  bool Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }
  bool Add(Value v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Frame& top = stack_.back();
    if (top.is_object) {
      top.dict->Set(Value::String(std::move(top.key)), std::move(v));
      top.key.clear();
    } else {
      top.list.push_back(std::move(v));
    }
    return true;
  }
  bool Open(bool is_object) {
    if (static_cast<int>(stack_.size()) >= kMaxValueDepth) return Fail("JSON nested too deeply");
    Frame frame;
    frame.is_object = is_object;
    if (is_object) frame.dict = std::make_shared<Dict>();
    stack_.push_back(std::move(frame));
    return true;
  }
  bool Close() {
    Frame frame = std::move(stack_.back());
    stack_.pop_back();
    return Add(frame.is_object ? Value::FromDict(std::move(frame.dict)) : Value::List(std::move(frame.list)));
  }

  std::vector<Frame> stack_;
  Value root_;
  std::string error_;
};

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 1;
    const char32_t cp = DecodeUtf8(s, pos, &len);
    char buf[16];
    switch (cp) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp == 0x7F)) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
          out.append(buf);
        } else if (ensure_ascii && cp >= 0x80) {
          if (cp >= 0x10000) {
            const unsigned v = static_cast<unsigned>(cp) - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
          }
          out.append(buf);
        } else {
          out.append(s.substr(pos, len));
        }
    }
    pos += len;
  }
  out.push_back('"');
}

std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return FormatPythonFloat(d);
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options) : options_(options) {
    if (options.use_indent_string) {
      indent_ = options.indent_string;
      pretty_ = true;
    } else if (options.indent >= 0) {
      indent_.assign(options.indent, ' ');
      pretty_ = true;
    }
    item_sep_ = options.separators_given ? options.item_separator : (pretty_ ? "," : ", ");
    key_sep_ = options.separators_given ? options.key_separator : ": ";
  }

  absl::Status Write(const Value& v, int depth, std::string& out) {
    if (depth > kMaxValueDepth) return absl::InvalidArgumentError("tojson: value nested too deeply");
    switch (v.kind()) {
      case Value::Kind::kNone: out.append("null"); return absl::OkStatus();
      case Value::Kind::kBool: out.append(v.AsBool() ? "true" : "false"); return absl::OkStatus();
      case Value::Kind::kInt: out.append(std::to_string(v.AsInt())); return absl::OkStatus();
      case Value::Kind::kFloat: out.append(JsonFloat(v.AsDouble())); return absl::OkStatus();
      case Value::Kind::kString: AppendJsonString(v.AsString(), options_.ensure_ascii, out); return absl::OkStatus();
      case Value::Kind::kList:
      case Value::Kind::kTuple:
        if (v.IsView()) break;
        return WriteList(v.AsList(), depth, out);
      case Value::Kind::kDict:
        if (!v.IsNamespace()) return WriteDict(v.AsDict(), depth, out);
        break;
      default:
        break;
    }
    return absl::InvalidArgumentError(StrCat("Object of type ", v.IsView() && !v.AsBool() ? v.view_repr() : std::string(v.TypeName()),
                                             " is not JSON serializable"));
  }

 private:
  void NewLine(int depth, std::string& out) {
    if (!pretty_) return;
    out.push_back('\n');
    for (int i = 0; i < depth; ++i) out.append(indent_);
  }

  absl::Status WriteList(const ValueList& items, int depth, std::string& out) {
    if (items.empty()) {
      out.append("[]");
      return absl::OkStatus();
    }
    out.push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out.append(item_sep_);
      NewLine(depth + 1, out);
      absl::Status status = Write(items[i], depth + 1, out);
      if (!status.ok()) return status;
    }
    NewLine(depth, out);
    out.push_back(']');
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> KeyText(const Value& key) {
    switch (key.kind()) {
      case Value::Kind::kString: return key.AsString();
      case Value::Kind::kNone: return std::string("null");
      case Value::Kind::kBool: return std::string(key.AsBool() ? "true" : "false");
      case Value::Kind::kInt: return std::to_string(key.AsInt());
      case Value::Kind::kFloat: return JsonFloat(key.AsDouble());
      default:
        return absl::InvalidArgumentError(
            StrCat("keys must be str, int, float, bool or None, not ", key.TypeName()));
    }
  }

  absl::Status WriteDict(const Dict& dict, int depth, std::string& out) {
    if (dict.items.empty()) {
      out.append("{}");
      return absl::OkStatus();
    }
    std::vector<std::pair<std::string, const Value*>> entries;
    for (const auto& [key, value] : dict.items) {
      absl::StatusOr<std::string> text = KeyText(key);
      if (!text.ok()) return text.status();
      entries.emplace_back(std::move(*text), &value);
    }
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out.push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out.append(item_sep_);
      NewLine(depth + 1, out);
      AppendJsonString(entries[i].first, options_.ensure_ascii, out);
      out.append(key_sep_);
      absl::Status status = Write(*entries[i].second, depth + 1, out);
      if (!status.ok()) return status;
    }
    NewLine(depth, out);
    out.push_back('}');
    return absl::OkStatus();
  }

  const JsonDumpOptions& options_;
  bool pretty_ = false;
  std::string indent_;
  std::string item_sep_;
  std::string key_sep_;
};

}  // namespace

absl::StatusOr<Value> ParseJson(std::string_view text) {
  ValueBuilder builder;
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &builder,
                                            nlohmann::json::input_format_t::json, true);
  if (!ok || !builder.error().empty()) {
    return absl::InvalidArgumentError(builder.error().empty() ? "invalid JSON" : builder.error());
  }
  return std::move(builder.root());
}

absl::StatusOr<std::string> DumpJson(const Value& value, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  std::string out;
  absl::Status status = writer.Write(value, 0, out);
  if (!status.ok()) return status;
  return out;
}

}  // namespace loom::text::jinja
