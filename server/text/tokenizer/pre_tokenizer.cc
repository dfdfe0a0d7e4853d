#include "server/text/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/tokenizer/byte_level.h"
#include "server/text/tokenizer/pattern.h"
#include "server/text/unicode/unicode.h"
#include "engine/common/utf8.h"

namespace loom::text {
namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;

// The GPT-2 pattern ByteLevel uses when use_regex is true.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// One range per character of `text` for which `pred` holds.
template <typename Pred>
void CharMatches(std::string_view text, Pred pred, Ranges* out) {
  size_t len = 0;
  for (size_t pos = 0; pos < text.size(); pos += len) {
    if (pred(DecodeUtf8(text, pos, &len))) out->emplace_back(pos, pos + len);
  }
}

bool IsNumeric(char32_t cp) {
  const GeneralCategory c = CategoryOf(cp);
  return c == GeneralCategory::kNd || c == GeneralCategory::kNl || c == GeneralCategory::kNo;
}

bool IsPunctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '!' && cp <= '/') || (cp >= ':' && cp <= '@') || (cp >= '[' && cp <= '`') ||
           (cp >= '{' && cp <= '~');
  }
  const auto c = CategoryOf(cp);
  return c >= GeneralCategory::kPc && c <= GeneralCategory::kPo;
}

// Unicode \w (UTS #18): letters, marks, decimal and letter numbers, connector punctuation and
// the joiners U+200C / U+200D.
bool IsWordChar(char32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  const auto c = CategoryOf(cp);
  return c <= GeneralCategory::kLo || (c >= GeneralCategory::kMn && c <= GeneralCategory::kMe) ||
         c == GeneralCategory::kNd || c == GeneralCategory::kNl || c == GeneralCategory::kPc;
}

// A pre-tokenizer that splits each piece at the ranges `find` reports.
class SplitPreTokenizer final : public PreTokenizer {
 public:
  using Finder = std::function<void(std::string_view, Ranges*)>;
  SplitPreTokenizer(Finder find, SplitBehavior behavior, bool invert)
      : find_(std::move(find)), behavior_(behavior), invert_(invert) {}

  void PreTokenize(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces->size());
    Ranges matches;
    for (const Piece& piece : *pieces) {
      matches.clear();
      find_(piece.text, &matches);
      SplitPiece(piece, matches, behavior_, invert_, &out);
    }
    *pieces = std::move(out);
  }

 private:
  Finder find_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Pattern> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  void PreTokenize(std::vector<Piece>* pieces) const override {
    std::vector<Piece> split;
    Ranges matches;
    for (Piece& piece : *pieces) {
      if (add_prefix_space_ && (piece.text.empty() || piece.text[0] != ' ')) {
        piece.text.insert(0, 1, ' ');
      }
      if (regex_.has_value()) {
        matches.clear();
        regex_->FindAll(piece.text, &matches);
        SplitPiece(piece, matches, SplitBehavior::kIsolated, false, &split);
      } else if (!piece.text.empty()) {
        split.push_back(std::move(piece));
      }
    }
    for (Piece& piece : split) {
      std::string mapped;
      mapped.reserve(piece.text.size() * 2);
      AppendByteLevel(piece.text, &mapped);
      piece.text = std::move(mapped);
    }
    *pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  std::optional<Pattern> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}

  void PreTokenize(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    Ranges matches;
    for (Piece& piece : *pieces) {
      std::string text;
      text.reserve(piece.text.size() + replacement_.size());
      for (char c : piece.text) {
        if (c == ' ') {
          text += replacement_;
        } else {
          text += c;
        }
      }
      const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways ||
                      (scheme_ == PrependScheme::kFirst && piece.at_start))) {
        text.insert(0, replacement_);
      }
      piece.text = std::move(text);
      if (split_) {
        matches.clear();
        Pattern::Literal(replacement_).FindAll(piece.text, &matches);
        SplitPiece(piece, matches, SplitBehavior::kMergedWithNext, false, &out);
      } else if (!piece.text.empty()) {
        out.push_back(std::move(piece));
      }
    }
    *pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

// Whitespace: runs of word characters and runs of other non-space characters; spaces removed.
void WhitespaceMatches(std::string_view text, Ranges* out) {
  size_t len = 0;
  int kind = 0;  // 0: none, 1: word run, 2: other run
  for (size_t pos = 0; pos < text.size(); pos += len) {
    const char32_t cp = DecodeUtf8(text, pos, &len);
    const int k = IsWordChar(cp) ? 1 : (IsWhitespace(cp) ? 0 : 2);
    if (k != 0 && k == kind) {
      out->back().second = pos + len;
    } else if (k != 0) {
      out->emplace_back(pos, pos + len);
    }
    kind = k;
  }
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    for (const auto& part : parts_) part->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

absl::StatusOr<SplitBehavior> ParseBehavior(const Json& json, std::string_view fallback) {
  LOOM_ASSIGN_OR_RETURN(std::string name, json.GetString("behavior", std::string(fallback)));
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(StrCat(json.path(), ".behavior: unknown value \"", name, "\""));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseMetaspace(const Json& json) {
  LOOM_ASSIGN_OR_RETURN(std::string replacement, json.GetString("replacement", "\xE2\x96\x81"));
  if (replacement.empty()) {
    return absl::InvalidArgumentError(StrCat(json.path(), ".replacement: must not be empty"));
  }
  PrependScheme scheme = PrependScheme::kAlways;
  if (json.Has("prepend_scheme")) {
    LOOM_ASSIGN_OR_RETURN(std::string name, json.GetString("prepend_scheme"));
    if (name == "always") {
      scheme = PrependScheme::kAlways;
    } else if (name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (name == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return absl::InvalidArgumentError(
          StrCat(json.path(), ".prepend_scheme: unknown value \"", name, "\""));
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(bool add_prefix_space, json.GetBool("add_prefix_space", true));
    scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  LOOM_ASSIGN_OR_RETURN(bool split, json.GetBool("split", true));
  return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split);
}

}  // namespace

void SplitPiece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                SplitBehavior behavior, bool invert, std::vector<Piece>* out) {
  const std::string& text = piece.text;
  // Segments covering the whole text, each flagged as a match or not.
  struct Segment {
    size_t begin, end;
    bool match;
  };
  std::vector<Segment> segments;
  segments.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > prev) segments.push_back({prev, begin, invert});
    segments.push_back({begin, end, !invert});
    prev = end;
  }
  if (prev < text.size() || text.empty()) segments.push_back({prev, text.size(), invert});

  std::vector<std::pair<size_t, size_t>> kept;
  kept.reserve(segments.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.match) kept.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) kept.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        if (s.match && !previous_match && !kept.empty()) {
          kept.back().second = s.end;
        } else {
          kept.emplace_back(s.begin, s.end);
        }
        previous_match = s.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t i = segments.size(); i-- > 0;) {
        const Segment& s = segments[i];
        if (s.match && !previous_match && !kept.empty()) {
          kept.back().first = s.begin;
        } else {
          kept.emplace_back(s.begin, s.end);
        }
        previous_match = s.match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < segments.size(); ++i) {
        const Segment& s = segments[i];
        if (i > 0 && s.match == previous_match) {
          kept.back().second = s.end;
        } else {
          kept.emplace_back(s.begin, s.end);
        }
        previous_match = s.match;
      }
      break;
  }
  for (const auto& [begin, end] : kept) {
    if (begin == end) continue;
    out->push_back(Piece{text.substr(begin, end - begin), piece.at_start && begin == 0});
  }
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& json) {
  if (json.IsNull()) return nullptr;
  if (!json.IsObject())
    return absl::InvalidArgumentError(StrCat(json.path(), ": expected an object"));
  LOOM_ASSIGN_OR_RETURN(std::string type, json.GetString("type"));
  if (type == "ByteLevel") {
    LOOM_ASSIGN_OR_RETURN(bool add_prefix_space, json.GetBool("add_prefix_space", true));
    LOOM_ASSIGN_OR_RETURN(bool use_regex, json.GetBool("use_regex", true));
    std::optional<Pattern> regex;
    if (use_regex) {
      LOOM_ASSIGN_OR_RETURN(regex, Pattern::FromRegex(kGpt2Pattern));
    }
    return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
  }
  if (type == "Split") {
    LOOM_ASSIGN_OR_RETURN(Json pattern_json, json.Get("pattern"));
    LOOM_ASSIGN_OR_RETURN(Pattern pattern, Pattern::FromJson(pattern_json));
    LOOM_ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(json, "Isolated"));
    LOOM_ASSIGN_OR_RETURN(bool invert, json.GetBool("invert", false));
    auto find = [pattern = std::move(pattern)](std::string_view text, Ranges* out) {
      pattern.FindAll(text, out);
    };
    return std::make_unique<SplitPreTokenizer>(std::move(find), behavior, invert);
  }
  if (type == "Metaspace") return ParseMetaspace(json);
  if (type == "Digits") {
    LOOM_ASSIGN_OR_RETURN(bool individual, json.GetBool("individual_digits", false));
    auto find = [](std::string_view text, Ranges* out) { CharMatches(text, IsNumeric, out); };
    return std::make_unique<SplitPreTokenizer>(
        find, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false);
  }
  if (type == "WhitespaceSplit") {
    auto find = [](std::string_view text, Ranges* out) { CharMatches(text, IsWhitespace, out); };
    return std::make_unique<SplitPreTokenizer>(find, SplitBehavior::kRemoved, false);
  }
  if (type == "Whitespace") {
    return std::make_unique<SplitPreTokenizer>(WhitespaceMatches, SplitBehavior::kRemoved, true);
  }
  if (type == "Punctuation") {
    LOOM_ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(json, "Isolated"));
    auto find = [](std::string_view text, Ranges* out) { CharMatches(text, IsPunctuation, out); };
    return std::make_unique<SplitPreTokenizer>(find, behavior, false);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    parts.push_back(std::make_unique<SplitPreTokenizer>(
        [](std::string_view text, Ranges* out) { CharMatches(text, IsWhitespace, out); },
        SplitBehavior::kRemoved, false));
    parts.push_back(std::make_unique<SplitPreTokenizer>(
        [](std::string_view text, Ranges* out) { CharMatches(text, IsPunctuation, out); },
        SplitBehavior::kIsolated, false));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "Sequence") {
    LOOM_ASSIGN_OR_RETURN(Json list, json.Get("pretokenizers"));
    if (!list.IsArray())
      return absl::InvalidArgumentError(StrCat(list.path(), ": expected an array"));
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> part, ParsePreTokenizer(list[i]));
      if (part != nullptr) parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  return absl::InvalidArgumentError(
      StrCat(json.path(), ": pre-tokenizer type \"", type, "\" is not supported"));
}

}  // namespace loom::text
