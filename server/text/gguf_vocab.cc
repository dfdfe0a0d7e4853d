#include "server/text/gguf_vocab.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "engine/common/strings.h"
#include "engine/common/status.h"
#include "engine/common/utf8.h"

namespace loom::text {
namespace {

absl::Status Invalid(const GgufFile& file, std::string_view key, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(file.path(), ": ", key, ": ", what));
}

// An optional scalar string; InvalidArgument when present with another type.
absl::StatusOr<std::optional<std::string_view>> OptionalString(const GgufFile& file,
                                                               std::string_view key) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) return std::nullopt;
  std::optional<std::string_view> s = value->String();
  if (!s) return Invalid(file, key, StrCat("expected a string, got ", GgufTypeName(value->type())));
  if (!IsValidUtf8(*s)) return Invalid(file, key, "not valid UTF-8");
  return s;
}

absl::StatusOr<std::optional<bool>> OptionalBool(const GgufFile& file, std::string_view key) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) return std::nullopt;
  std::optional<bool> b = value->Bool();
  if (!b) return Invalid(file, key, StrCat("expected a bool, got ", GgufTypeName(value->type())));
  return b;
}

// A special token id: absent, or an integer. An id outside the vocabulary is ignored with a
// warning, as llama.cpp does (transformers would fail to load the tokenizer).
absl::Status ReadTokenId(const GgufFile& file, std::string_view key, GgufVocab& vocab,
                         std::optional<int32_t>& id) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) return absl::OkStatus();
  std::optional<int64_t> v = value->Int();
  if (!v) {
    return Invalid(file, key, StrCat("expected an integer, got ", GgufTypeName(value->type())));
  }
  if (*v < 0 || *v >= static_cast<int64_t>(vocab.tokens.size())) {
    vocab.warnings.push_back(StrCat(key, " = ", *v,
                                          " is outside the vocabulary of ", vocab.tokens.size(),
                                          " tokens; ignored"));
    return absl::OkStatus();
  }
  id = static_cast<int32_t>(*v);
  return absl::OkStatus();
}

// An array of `element`-typed values (GgufValue::type() kArray); nullptr when absent.
absl::StatusOr<const GgufValue*> OptionalArray(const GgufFile& file, std::string_view key,
                                               std::string_view element) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) return nullptr;
  if (value->type() != GgufType::kArray) {
    return Invalid(file, key, StrCat("expected an array of ", element, ", got ",
                                           GgufTypeName(value->type())));
  }
  return value;
}

absl::StatusOr<std::vector<std::string_view>> Strings(const GgufFile& file, std::string_view key,
                                                      const GgufValue& array) {
  std::vector<std::string_view> out;
  out.reserve(static_cast<size_t>(array.size()));
  for (int64_t i = 0; i < array.size(); ++i) {
    std::optional<std::string_view> s = array.StringAt(i);
    if (!s) {
      return Invalid(file, key, StrCat("expected strings, got ",
                                             GgufTypeName(array.element_type())));
    }
    if (!IsValidUtf8(*s)) return Invalid(file, StrCat(key, "[", i, "]"), "not valid UTF-8");
    out.push_back(*s);
  }
  return out;
}

size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 1;
    DecodeUtf8(s, pos, &len);
    pos += len;
    ++n;
  }
  return n;
}

}  // namespace

absl::StatusOr<GgufVocab> ReadGgufVocab(const GgufFile& file) {
  GgufVocab vocab;
  constexpr std::string_view kModel = "tokenizer.ggml.model";
  constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
  LOOM_ASSIGN_OR_RETURN(std::optional<std::string_view> model, OptionalString(file, kModel));
  LOOM_ASSIGN_OR_RETURN(const GgufValue* tokens, OptionalArray(file, kTokens, "strings"));
  if (!model || tokens == nullptr) {
    return absl::NotFoundError(StrCat(file.path(), ": no tokenizer (", kModel, " and ",
                                            kTokens, " are required)"));
  }
  vocab.model = *model;
  LOOM_ASSIGN_OR_RETURN(vocab.tokens, Strings(file, kTokens, *tokens));
  if (vocab.tokens.empty()) return Invalid(file, kTokens, "empty vocabulary");
  if (vocab.tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return Invalid(file, kTokens, "more tokens than int32 ids");
  }
  LOOM_ASSIGN_OR_RETURN(std::optional<std::string_view> architecture,
                        OptionalString(file, "general.architecture"));
  vocab.architecture = architecture.value_or("");
  LOOM_ASSIGN_OR_RETURN(std::optional<std::string_view> pre,
                        OptionalString(file, "tokenizer.ggml.pre"));
  vocab.pre = pre.value_or("");

  constexpr std::string_view kTypes = "tokenizer.ggml.token_type";
  LOOM_ASSIGN_OR_RETURN(const GgufValue* types, OptionalArray(file, kTypes, "integers"));
  if (types != nullptr) {
    for (int64_t i = 0; i < types->size(); ++i) {
      std::optional<int64_t> t = types->IntAt(i);
      if (!t || *t < INT32_MIN || *t > INT32_MAX) {
        return Invalid(file, StrCat(kTypes, "[", i, "]"), "expected an int32");
      }
      vocab.token_types.push_back(static_cast<int32_t>(*t));
    }
  }
  constexpr std::string_view kScores = "tokenizer.ggml.scores";
  LOOM_ASSIGN_OR_RETURN(const GgufValue* scores, OptionalArray(file, kScores, "floats"));
  if (scores != nullptr) {
    for (int64_t i = 0; i < scores->size(); ++i) {
      std::optional<double> s = scores->FloatAt(i);
      if (!s || std::isnan(*s)) {
        return Invalid(file, StrCat(kScores, "[", i, "]"), "expected a float (not NaN)");
      }
      vocab.scores.push_back(*s);
    }
  }
  constexpr std::string_view kMerges = "tokenizer.ggml.merges";
  LOOM_ASSIGN_OR_RETURN(const GgufValue* merges, OptionalArray(file, kMerges, "strings"));
  if (merges != nullptr) {
    vocab.has_merges = true;
    LOOM_ASSIGN_OR_RETURN(vocab.merges, Strings(file, kMerges, *merges));
  }

  LOOM_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.bos_token_id", vocab, vocab.bos_id));
  LOOM_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.eos_token_id", vocab, vocab.eos_id));
  LOOM_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.unknown_token_id", vocab, vocab.unk_id));
  LOOM_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.padding_token_id", vocab, vocab.pad_id));
  LOOM_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.eot_token_id", vocab, vocab.eot_id));
  LOOM_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.eom_token_id", vocab, vocab.eom_id));
  LOOM_ASSIGN_OR_RETURN(vocab.add_bos, OptionalBool(file, "tokenizer.ggml.add_bos_token"));
  LOOM_ASSIGN_OR_RETURN(vocab.add_eos, OptionalBool(file, "tokenizer.ggml.add_eos_token"));
  LOOM_ASSIGN_OR_RETURN(vocab.chat_template, OptionalString(file, "tokenizer.chat_template"));
  return vocab;
}

std::vector<std::pair<std::string, std::string>> GenerateMerges(
    const std::vector<std::string_view>& tokens, const std::vector<double>& scores) {
  absl::flat_hash_map<std::string_view, int32_t> vocab;
  vocab.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = static_cast<int32_t>(i);
  // dict(zip(tokens, scores)): first-occurrence order, last score.
  std::vector<std::string_view> scored;
  absl::flat_hash_map<std::string_view, double> score_of;
  const size_t num_scored = std::min(tokens.size(), scores.size());
  for (size_t i = 0; i < num_scored; ++i) {
    auto [it, inserted] = score_of.insert_or_assign(tokens[i], scores[i]);
    if (inserted) scored.push_back(tokens[i]);
  }

  struct Candidate {
    std::string_view left;
    std::string_view right;
    double score;
    size_t left_len;
    size_t right_len;
  };
  std::vector<Candidate> merges;
  std::vector<Candidate> local;
  for (std::string_view token : scored) {
    local.clear();
    const double score = score_of[token];
    size_t pos = 0;
    size_t left_len = 0;
    const size_t total_len = CodePoints(token);
    while (pos < token.size()) {
      size_t len = 1;
      DecodeUtf8(token, pos, &len);
      pos += len;
      ++left_len;
      if (pos >= token.size()) break;  // splits leave both sides non-empty
      std::string_view left = token.substr(0, pos);
      std::string_view right = token.substr(pos);
      if (vocab.contains(left) && vocab.contains(right)) {
        local.push_back({left, right, score, left_len, total_len - left_len});
      }
    }
    std::stable_sort(local.begin(), local.end(), [&](const Candidate& a, const Candidate& b) {
      return std::make_pair(vocab[a.left], vocab[a.right]) <
             std::make_pair(vocab[b.left], vocab[b.right]);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  // sorted(..., reverse=True) keeps equal keys in their original order, as stable_sort on ">".
  std::stable_sort(merges.begin(), merges.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.score, a.left_len, a.right_len) > std::tie(b.score, b.left_len, b.right_len);
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const Candidate& m : merges) out.emplace_back(std::string(m.left), std::string(m.right));
  return out;
}

}  // namespace loom::text
