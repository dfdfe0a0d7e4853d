// The tokenizer a GGUF file describes, read out of its `tokenizer.*` metadata (llama.cpp's key
// names) and validated, before gguf_text.h turns it into a Tokenizer and a ChatTemplate.
//
// A GGUF file carries no tokenizer.json. llama.cpp's converters store the vocabulary as parallel
// arrays (tokenizer.ggml.tokens, .token_type, .scores), the byte-pair merges when the model has
// them (.merges), the ids of the special tokens (.bos_token_id, ...), the add_bos/add_eos flags
// and the chat template (tokenizer.chat_template).
//
// Everything here comes from a file, so nothing is asserted: a missing or mistyped required key,
// a token that is not UTF-8 or a score that is NaN is InvalidArgument
// naming the file and the key (and index); a special token id
// outside the vocabulary is ignored with a warning, as llama.cpp ignores it. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/weights/gguf.h"

namespace loom::text {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The tokenizer metadata of one GGUF file. Strings point into the file's bytes (the GgufFile must
// outlive this).
struct GgufVocab {
  std::string_view architecture;  // general.architecture ("" when absent)
  std::string_view model;         // tokenizer.ggml.model: "gpt2", "llama", ...
  std::string_view pre;           // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string_view> tokens;  // by id
  std::vector<int32_t> token_types;      // by id; may be shorter than tokens (even empty)
  std::vector<double> scores;            // by id; may be shorter than tokens (even empty)
  bool has_merges = false;
  std::vector<std::string_view> merges;  // "left right", in rank order
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  std::optional<int32_t> unk_id;
  std::optional<int32_t> pad_id;
  std::optional<int32_t> eot_id;  // end of turn (Llama 3's <|eot_id|>, ...)
  std::optional<int32_t> eom_id;  // end of message (Llama 3.1's <|eom_id|>)
  std::optional<bool> add_bos;    // tokenizer.ggml.add_bos_token, when the file says
  std::optional<bool> add_eos;    // tokenizer.ggml.add_eos_token, when the file says
  std::optional<std::string_view> chat_template;  // tokenizer.chat_template
  // What was ignored (a special token id past the vocabulary, as llama.cpp ignores it), for the
  // caller to log.
  std::vector<std::string> warnings;
};

// Reads and validates the tokenizer metadata of `file`. NotFound when the file has no
// tokenizer.ggml.model or tokenizer.ggml.tokens (a GGUF without a tokenizer).
absl::StatusOr<GgufVocab> ReadGgufVocab(const GgufFile& file);

// The merges a SentencePiece vocabulary implies when the file lists none, in the order
// transformers' `generate_merges(vocab, vocab_scores)` gives them. The vocabulary maps each token
// to its id (the last id where a token repeats); each scored token (tokens[i] with i <
// scores.size(), in first-occurrence order, with the last score where it repeats) contributes
// every split of itself into two vocabulary tokens, ordered by the two parts' ids; then all of
// them are ordered by (score, length of the left part, length of the right part in code points),
// highest first, ties keeping that order. Scores must not be NaN (ReadGgufVocab refuses them).
std::vector<std::pair<std::string, std::string>> GenerateMerges(
    const std::vector<std::string_view>& tokens, const std::vector<double>& scores);

}  // namespace loom::text
