#include "server/text/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/text/tokenizer/bpe_model.h"
#include "server/text/unicode/unicode.h"
#include "engine/common/utf8.h"

namespace loom::text {
namespace {

// Rust `char::is_alphanumeric() || c == '_'` (letters and numbers).
bool IsWordChar(char32_t cp) {
  if (cp == '_') return true;
  const GeneralCategory c = CategoryOf(cp);
  return c <= GeneralCategory::kLo || (c >= GeneralCategory::kNd && c <= GeneralCategory::kNo);
}

// Start of the last character of text[0, end).
size_t PrevCharStart(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

}  // namespace

void AddedVocabulary::Trie::Insert(std::string_view key, int32_t token_index) {
  if (key.empty()) return;
  first_byte[static_cast<unsigned char>(key[0])] = true;
  int32_t node = 0;
  for (unsigned char b : key) {
    auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, int32_t{-1}));
    if (it != children.end() && it->first == b) {
      node = it->second;
      continue;
    }
    const auto child = static_cast<int32_t>(nodes.size());
    children.insert(it, {b, child});
    nodes.emplace_back();
    node = child;
  }
  // The first token with a given content wins.
  if (nodes[node].token_index < 0) nodes[node].token_index = token_index;
}

int32_t AddedVocabulary::Trie::LongestAt(std::string_view text, size_t pos, size_t* len) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    const auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, int32_t{-1}));
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes[node].token_index >= 0) {
      best = nodes[node].token_index;
      *len = i + 1 - pos;
    }
  }
  return best;
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const Json& added_tokens,
                                                          const Normalizer* normalizer) {
  AddedVocabulary vocab;
  vocab.normalizer_ = normalizer;
  if (added_tokens.IsNull()) return vocab;
  if (!added_tokens.IsArray()) {
    return absl::InvalidArgumentError(StrCat(added_tokens.path(), ": expected an array"));
  }
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const Json entry = added_tokens[i];
    if (!entry.IsObject()) {
      return absl::InvalidArgumentError(StrCat(entry.path(), ": expected an object"));
    }
    AddedToken token;
    LOOM_ASSIGN_OR_RETURN(int64_t id, entry.GetInt("id"));
    if (id < 0 || id > BpeModel::kMaxVocabId) {
      return absl::InvalidArgumentError(StrCat(entry.path(), ".id: out of range: ", id));
    }
    token.id = static_cast<int32_t>(id);
    LOOM_ASSIGN_OR_RETURN(token.content, entry.GetString("content"));
    LOOM_ASSIGN_OR_RETURN(token.special, entry.GetBool("special", false));
    LOOM_ASSIGN_OR_RETURN(token.single_word, entry.GetBool("single_word", false));
    LOOM_ASSIGN_OR_RETURN(token.lstrip, entry.GetBool("lstrip", false));
    LOOM_ASSIGN_OR_RETURN(token.rstrip, entry.GetBool("rstrip", false));
    LOOM_ASSIGN_OR_RETURN(token.normalized, entry.GetBool("normalized", !token.special));
    vocab.by_id_.try_emplace(token.id, vocab.tokens_.size());
    vocab.by_content_.try_emplace(token.content, vocab.tokens_.size());
    vocab.tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
    AddedToken& token = vocab.tokens_[i];
    if (!token.normalized) {
      token.decoded = token.content;
      vocab.raw_trie_.Insert(token.content, static_cast<int32_t>(i));
      continue;
    }
    std::string form = SanitizeUtf8(token.content);
    if (normalizer != nullptr) normalizer->Normalize(&form);
    token.decoded = form;
    vocab.normalized_trie_.Insert(form, static_cast<int32_t>(i));
  }
  return vocab;
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::FindByContent(std::string_view content) const {
  auto it = by_content_.find(absl::string_view(content.data(), content.size()));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::FindMatches(std::string_view text, const Trie& trie,
                                  std::vector<Match>* matches) const {
  size_t consumed = 0;  // end of the previous accepted match (after rstrip)
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    const int32_t index = trie.first_byte[static_cast<unsigned char>(text[pos])]
                              ? trie.LongestAt(text, pos, &len)
                              : -1;
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t begin = pos;
    size_t end = pos + len;
    pos = end;
    if (begin < consumed) continue;
    size_t char_len = 0;
    if (token.single_word) {
      const bool word_before =
          begin > 0 && IsWordChar(DecodeUtf8(text, PrevCharStart(text, begin), &char_len));
      const bool word_after = end < text.size() && IsWordChar(DecodeUtf8(text, end, &char_len));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      while (begin > consumed) {
        const size_t start = PrevCharStart(text, begin);
        if (!IsWhitespace(DecodeUtf8(text, start, &char_len))) break;
        begin = start;
      }
    }
    if (token.rstrip) {
      while (end < text.size() && IsWhitespace(DecodeUtf8(text, end, &char_len))) end += char_len;
    }
    matches->push_back(Match{begin, end, index});
    consumed = end;
    pos = std::max(pos, end);
  }
}

void AddedVocabulary::Split(std::string_view text, std::vector<Segment>* out) const {
  std::vector<Match> raw;
  FindMatches(text, raw_trie_, &raw);
  std::vector<Match> normalized_matches;
  auto emit_text = [&](std::string_view raw_piece, bool at_start) {
    std::string normalized(raw_piece);
    if (normalizer_ != nullptr) normalizer_->Normalize(&normalized);
    normalized_matches.clear();
    FindMatches(normalized, normalized_trie_, &normalized_matches);
    size_t prev = 0;
    for (const Match& m : normalized_matches) {
      if (m.begin > prev) {
        out->push_back(Segment{
            std::nullopt, Piece{normalized.substr(prev, m.begin - prev), at_start && prev == 0}});
      }
      out->push_back(Segment{tokens_[m.token_index].id, Piece{}});
      prev = m.end;
    }
    if (prev < normalized.size()) {
      out->push_back(Segment{std::nullopt, Piece{normalized.substr(prev), at_start && prev == 0}});
    }
  };
  size_t prev = 0;
  for (const Match& m : raw) {
    if (m.begin > prev) emit_text(text.substr(prev, m.begin - prev), prev == 0);
    out->push_back(Segment{tokens_[m.token_index].id, Piece{}});
    prev = m.end;
  }
  if (prev < text.size()) emit_text(text.substr(prev), prev == 0);
}

}  // namespace loom::text
