// Incremental detokenization for streaming: one Detokenizer per request turns the generated ids,
// fed one at a time, into text that is final (never revised), and applies stop strings.
//
// Invariant: with no stop string, the concatenation of everything Add and Finish return equals
// `tokenizer.Decode(all_ids, skip_special_tokens)`. To get there:
//   - each step decodes a window of recent ids (from the start of the previously emitted chunk,
//     extended back while that chunk decodes to nothing) and emits what the new ids added, so
//     position-dependent decoders (SentencePiece "▁" and a stripped leading space at the very
//     start) give the same text as decoding everything;
//   - text ending in U+FFFD is held back (a character split across byte-level or byte-fallback
//     tokens is incomplete), and so is everything while the last token is a byte-fallback token
//     "<0xXX>" (the reference turns a whole ill-formed byte run into one U+FFFD per byte, which
//     can change text already decoded);
//   - Finish() flushes whatever is held; incomplete bytes become U+FFFD, as Decode does.
// Stop strings may span tokens: text that could still be the start of a stop string is held
// until decided, and the text returned never contains the stop string or anything after it.
//
// Not thread-safe: one request's thread owns it. The Tokenizer must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/text/tokenizer/tokenizer.h"

namespace loom::text {

// Streams one request's generated ids into final text.
class Detokenizer {
 public:
  // Per-request settings.
  struct Options {
    // Added tokens marked special produce no text (as Decode's skip_special_tokens).
    bool skip_special_tokens = true;
    // Generation stops at the first occurrence of any of these (empty strings are ignored).
    std::vector<std::string> stop_strings;
  };

  // `tokenizer` is not owned and must outlive this object.
  Detokenizer(const Tokenizer* tokenizer, Options options);

  // Feeds the next generated id; returns the text that became final (often empty). After a stop
  // string matched, returns "" and ignores the id.
  std::string Add(int32_t id);

  // Ends the stream: returns all text still held back (incomplete UTF-8 as U+FFFD). Stop strings
  // still apply. Later calls return "".
  std::string Finish();

  // True once a stop string matched.
  bool stopped() const { return stop_index_.has_value(); }
  // Index in Options::stop_strings of the stop string that matched.
  std::optional<size_t> stop_index() const { return stop_index_; }
  // The ids fed so far (including any after a stop, which are ignored).
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  // Text of ids_[begin, end).
  std::string DecodeRange(size_t begin, size_t end) const;
  // Decodes the new ids; returns the new final text, or nullopt to hold. `flush` decides all.
  std::optional<std::string> NewText(bool flush);
  // Applies stop strings to `text` (appended to the held tail); returns what may be emitted.
  std::string ApplyStops(std::string_view text, bool flush);
  // True when the last id that reaches the decoder is a byte-fallback token "<0xXX>".
  bool EndsInByteFallbackToken() const;

  const Tokenizer* tokenizer_;
  Options options_;
  std::vector<int32_t> ids_;
  // Emission boundaries: ids_[0, boundaries_.back()) have all their text emitted; each entry is
  // the end of one emitted chunk (the first is 0).
  std::vector<size_t> boundaries_{0};
  std::string stop_tail_;  // decoded text held for stop-string matching
  std::optional<size_t> stop_index_;
  bool finished_ = false;
};

}  // namespace loom::text
