// Added tokens of tokenizer.json ("added_tokens"): strings matched in the input before the model
// sees it, each encoded as its own id.
//
// Tokens with normalized=false are matched in the raw input; the pieces between them are
// normalized, and then tokens with normalized=true are matched (in their normalized form) in those
// normalized pieces. Matching is leftmost-longest. A token with single_word matches only when not
// preceded or followed by a word character (alphanumeric or '_'); lstrip / rstrip extend a match
// over the whitespace to its left / right, which is then dropped. The table is immutable after
// loading; Split is const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/common/json.h"
#include "server/text/tokenizer/normalizer.h"
#include "server/text/tokenizer/pre_tokenizer.h"

namespace loom::text {

// One entry of "added_tokens".
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  // What the token decodes to: `content`, normalized when `normalized` (as the reference does).
  std::string decoded;
};

// A piece of input after added-token extraction: either an added token's id or normalized text
// still to be pre-tokenized and encoded by the model.
struct Segment {
  std::optional<int32_t> token_id;
  Piece piece;  // empty when token_id is set
};

// The added tokens and their two matchers (raw and normalized text).
class AddedVocabulary {
 public:
  // Parses the "added_tokens" array (JSON null or missing means none). `normalizer` (may be
  // null) is used for the normalized forms of normalized tokens; it must outlive this object.
  static absl::StatusOr<AddedVocabulary> FromJson(const Json& added_tokens,
                                                  const Normalizer* normalizer);

  // Splits `text` (well-formed UTF-8) into added tokens and normalized text pieces, in order.
  void Split(std::string_view text, std::vector<Segment>* out) const;

  // All added tokens, in file order.
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // The added token with `id`, or nullptr.
  const AddedToken* FindById(int32_t id) const;
  // The added token whose content is `content`, or nullptr.
  const AddedToken* FindByContent(std::string_view content) const;

 private:
  // A byte trie over token strings for leftmost-longest matching.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
      int32_t token_index = -1;
    };
    std::vector<Node> nodes{1};
    bool first_byte[256] = {};
    void Insert(std::string_view key, int32_t token_index);
    // Longest key that starts at text[pos]: its token index and length, or -1.
    int32_t LongestAt(std::string_view text, size_t pos, size_t* len) const;
  };
  struct Match {
    size_t begin, end;
    int32_t token_index;
  };

  void FindMatches(std::string_view text, const Trie& trie, std::vector<Match>* matches) const;

  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<int32_t, size_t> by_id_;
  absl::flat_hash_map<std::string, size_t> by_content_;
  Trie raw_trie_;
  Trie normalized_trie_;
  const Normalizer* normalizer_ = nullptr;
};

}  // namespace loom::text
