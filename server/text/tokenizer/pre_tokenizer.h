// Pre-tokenizers from tokenizer.json ("pre_tokenizer"): split each normalized piece of input into
// the words the model encodes one at a time.
//
// Implemented types: ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern; offsets
// options are accepted and do not affect ids), Split (String or Regex pattern, behaviours Removed,
// Isolated, MergedWithPrevious, MergedWithNext, Contiguous, invert), Metaspace (replacement,
// prepend_scheme always/first/never or the older add_prefix_space, split), Digits,
// Whitespace, WhitespaceSplit, Punctuation, BertPreTokenizer, Sequence. Anything else is refused
// at load time with InvalidArgument naming the type. Immutable; PreTokenize is const and
// thread-safe.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/json.h"

namespace loom::text {

// One piece of input text on its way to the model.
struct Piece {
  std::string text;
  // True when the piece starts at byte 0 of the original input (Metaspace's "first" scheme
  // prepends its replacement only there).
  bool at_start = false;
};

// One pre-tokenizer (or a Sequence of them).
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `*pieces` by their sub-pieces, in order; empty pieces are dropped.
  virtual void PreTokenize(std::vector<Piece>* pieces) const = 0;
};

// How matches of a split pattern are turned into pieces (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits `piece` at `matches` (sorted, non-overlapping byte ranges within piece.text) according to
// `behavior` (with match and non-match swapped when `invert`), appending non-empty sub-pieces to
// `out`.
void SplitPiece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                SplitBehavior behavior, bool invert, std::vector<Piece>* out);

// Builds the pre-tokenizer that `json` describes; nullptr (no pre-tokenizer) for JSON null.
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& json);

}  // namespace loom::text
