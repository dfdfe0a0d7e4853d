#include "server/text/tokenizer/normalizer.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/tokenizer/pattern.h"
#include "server/text/unicode/unicode.h"
#include "engine/common/utf8.h"

namespace loom::text {
namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizationForm form) : form_(form) {}
  void Normalize(std::string* text) const override { *text = text::Normalize(*text, form_); }

 private:
  NormalizationForm form_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Normalize(std::string* text) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    pattern_.FindAll(*text, &matches);
    if (matches.empty()) return;
    std::string out;
    out.reserve(text->size());
    size_t prev = 0;
    for (const auto& [begin, end] : matches) {
      out.append(*text, prev, begin - prev);
      out.append(content_);
      prev = end;
    }
    out.append(*text, prev, std::string::npos);
    *text = std::move(out);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void Normalize(std::string* text) const override { *text = ToLowerCase(*text); }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* text) const override {
    size_t begin = 0;
    size_t end = text->size();
    size_t len = 0;
    if (left_) {
      while (begin < end && IsWhitespace(DecodeUtf8(*text, begin, &len))) begin += len;
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>((*text)[start]) & 0xC0) == 0x80)
          --start;
        if (!IsWhitespace(DecodeUtf8(*text, start, &len))) break;
        end = start;
      }
    }
    *text = text->substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void Normalize(std::string* text) const override {
    for (const auto& part : parts_) part->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& json) {
  if (json.IsNull()) return nullptr;
  if (!json.IsObject())
    return absl::InvalidArgumentError(StrCat(json.path(), ": expected an object"));
  LOOM_ASSIGN_OR_RETURN(std::string type, json.GetString("type"));
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Prepend") {
    LOOM_ASSIGN_OR_RETURN(std::string prefix, json.GetString("prepend"));
    return std::make_unique<PrependNormalizer>(std::move(prefix));
  }
  if (type == "Replace") {
    LOOM_ASSIGN_OR_RETURN(Json pattern_json, json.Get("pattern"));
    LOOM_ASSIGN_OR_RETURN(Pattern pattern, Pattern::FromJson(pattern_json));
    LOOM_ASSIGN_OR_RETURN(std::string content, json.GetString("content"));
    return std::make_unique<ReplaceNormalizer>(std::move(pattern), std::move(content));
  }
  if (type == "Strip") {
    LOOM_ASSIGN_OR_RETURN(bool left, json.GetBool("strip_left", true));
    LOOM_ASSIGN_OR_RETURN(bool right, json.GetBool("strip_right", true));
    return std::make_unique<StripNormalizer>(left, right);
  }
  if (type == "Sequence") {
    LOOM_ASSIGN_OR_RETURN(Json list, json.Get("normalizers"));
    if (!list.IsArray())
      return absl::InvalidArgumentError(StrCat(list.path(), ": expected an array"));
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> part, ParseNormalizer(list[i]));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  return absl::InvalidArgumentError(
      StrCat(json.path(), ": normalizer type \"", type, "\" is not supported"));
}

}  // namespace loom::text
