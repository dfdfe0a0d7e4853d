#include "server/text/tokenizer/decoder.h"

#include <utility>

#include "absl/status/status.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/tokenizer/byte_level.h"
#include "server/text/tokenizer/pattern.h"
#include "engine/common/utf8.h"

namespace loom::text {
namespace {

absl::Status Invalid(const Json& at, std::string_view message) {
  return absl::InvalidArgumentError(StrCat(at.path(), ": ", message));
}

// Each token's characters mapped back to bytes (a token with a character outside the table is
// kept as its UTF-8 bytes), all joined into one token, ill-formed UTF-8 replaced by U+FFFD.
class ByteLevelDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& token : *tokens) {
      const size_t mark = bytes.size();
      size_t len = 0;
      bool mapped = true;
      for (size_t pos = 0; pos < token.size(); pos += len) {
        const int b = ByteLevelByte(DecodeUtf8(token, pos, &len));
        if (b < 0) {
          mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!mapped) {
        bytes.resize(mark);
        bytes += token;
      }
    }
    tokens->assign(1, SanitizeUtf8(bytes));
  }
};

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Runs of <0xXX> tokens become the text their bytes spell, or one U+FFFD per byte when the run is
// not well-formed UTF-8.
class ByteFallbackDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string run;
    size_t run_len = 0;
    auto flush = [&] {
      if (run_len == 0) return;
      if (IsValidUtf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_len; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_len = 0;
    };
    for (std::string& token : *tokens) {
      int hi = -1;
      int lo = -1;
      if (token.size() == 6 && token.starts_with("<0x") && token[5] == '>') {
        hi = HexDigit(token[3]);
        lo = HexDigit(token[4]);
      }
      if (hi >= 0 && lo >= 0) {
        run.push_back(static_cast<char>(hi * 16 + lo));
        ++run_len;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    *tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& token : *tokens) all += token;
    tokens->assign(1, std::move(all));
  }
};

// Cuts up to `start` leading and `stop` trailing `content` characters from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, int64_t start, int64_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      size_t begin = 0;
      for (int64_t i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0 &&
                          begin < token.size();
           ++i) {
        begin += content_.size();
      }
      size_t end = token.size();
      for (int64_t i = 0; i < stop_ && end >= begin + content_.size() &&
                          token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;  // one character
  int64_t start_;
  int64_t stop_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_first)
      : replacement_(std::move(replacement)), drop_first_(drop_first) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      std::string out;
      out.reserve(token.size());
      size_t pos = 0;
      size_t found;
      while ((found = token.find(replacement_, pos)) != std::string::npos) {
        out.append(token, pos, found - pos);
        // The first token's replacements are the prepended ones: dropped, like the reference.
        if (i != 0 || !drop_first_) out.push_back(' ');
        pos = found + replacement_.size();
      }
      out.append(token, pos, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_first_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    for (std::string& token : *tokens) {
      matches.clear();
      pattern_.FindAll(token, &matches);
      if (matches.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (const auto& [begin, end] : matches) {
        out.append(token, prev, begin - prev);
        out += content_;
        prev = end;
      }
      out.append(token, prev, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// BPEDecoder: the end-of-word suffix becomes a space (nothing after the last token).
class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      const std::string space = i + 1 == tokens->size() ? "" : " ";
      std::string out;
      size_t pos = 0;
      size_t found;
      while (!suffix_.empty() && (found = token.find(suffix_, pos)) != std::string::npos) {
        out.append(token, pos, found - pos);
        out += space;
        pos = found + suffix_.size();
      }
      out.append(token, pos, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& part : parts_) part->DecodeChain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

absl::StatusOr<std::unique_ptr<Decoder>> ParseMetaspaceDecoder(const Json& json) {
  LOOM_ASSIGN_OR_RETURN(std::string replacement, json.GetString("replacement", "\xE2\x96\x81"));
  if (replacement.empty()) return Invalid(json, "replacement must not be empty");
  bool drop_first = true;
  if (json.Has("prepend_scheme")) {
    LOOM_ASSIGN_OR_RETURN(std::string scheme, json.GetString("prepend_scheme"));
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      return Invalid(json, StrCat("unknown prepend_scheme \"", scheme, "\""));
    }
    drop_first = scheme != "never";
  } else {
    LOOM_ASSIGN_OR_RETURN(drop_first, json.GetBool("add_prefix_space", true));
  }
  return std::make_unique<MetaspaceDecoder>(std::move(replacement), drop_first);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& json) {
  if (json.IsNull()) return nullptr;
  if (!json.IsObject()) return Invalid(json, "expected an object");
  LOOM_ASSIGN_OR_RETURN(std::string type, json.GetString("type"));
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Metaspace") return ParseMetaspaceDecoder(json);
  if (type == "Strip") {
    LOOM_ASSIGN_OR_RETURN(std::string content, json.GetString("content", " "));
    LOOM_ASSIGN_OR_RETURN(int64_t start, json.GetInt("start", 0));
    LOOM_ASSIGN_OR_RETURN(int64_t stop, json.GetInt("stop", 0));
    if (content.empty() || start < 0 || stop < 0) return Invalid(json, "bad Strip parameters");
    return std::make_unique<StripDecoder>(std::move(content), start, stop);
  }
  if (type == "Replace") {
    LOOM_ASSIGN_OR_RETURN(Json pattern_json, json.Get("pattern"));
    LOOM_ASSIGN_OR_RETURN(Pattern pattern, Pattern::FromJson(pattern_json));
    LOOM_ASSIGN_OR_RETURN(std::string content, json.GetString("content"));
    return std::make_unique<ReplaceDecoder>(std::move(pattern), std::move(content));
  }
  if (type == "BPEDecoder") {
    LOOM_ASSIGN_OR_RETURN(std::string suffix, json.GetString("suffix", "</w>"));
    return std::make_unique<BpeSuffixDecoder>(std::move(suffix));
  }
  if (type == "Sequence") {
    LOOM_ASSIGN_OR_RETURN(Json list, json.Get("decoders"));
    if (!list.IsArray()) return Invalid(list, "expected an array");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Decoder> part, ParseDecoder(list[i]));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  return Invalid(json, StrCat("decoder type \"", type, "\" is not supported"));
}

}  // namespace loom::text
