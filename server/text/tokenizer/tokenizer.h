// Tokenizer: Hugging Face tokenizer.json (+ tokenizer_config.json) loaded into a text <-> token id
// converter that gives the ids HF `tokenizers` gives.
//
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::LoadFromDir(model_dir));
//   std::vector<int32_t> ids = tok->Encode("Hello", /*add_special_tokens=*/true);
//   std::string text = tok->Decode(ids, /*skip_special_tokens=*/true);
//
// Encode runs the HF pipeline: invalid UTF-8 is replaced (Python `bytes.decode("utf-8",
// "replace")`); added tokens are split out (added_vocabulary.h); each remaining piece is
// normalized, pre-tokenized and encoded by the BPE model; with add_special_tokens the
// post-processor adds its tokens.
//
// Special tokens rule: `Encode(text, true)` equals HF `tokenizers.Tokenizer.encode(text,
// add_special_tokens=True)` on tokenizer.json. The post_processor alone decides what is added.
// Only when tokenizer.json has no post_processor, `add_bos_token` / `add_eos_token` from
// tokenizer_config.json (with its bos_token / eos_token) add BOS / EOS, like transformers'
// Llama and Gemma fast tokenizers do when they rebuild the post-processor from those flags.
//
// Immutable after loading (apart from the model's internal word cache): every method is const and
// thread-safe; one Tokenizer serves all server threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/text/tokenizer/added_vocabulary.h"
#include "server/text/tokenizer/bpe_model.h"
#include "server/text/tokenizer/decoder.h"
#include "server/text/tokenizer/normalizer.h"
#include "server/text/tokenizer/post_processor.h"
#include "server/text/tokenizer/pre_tokenizer.h"

namespace loom::text {

// A loaded tokenizer.json; see the file comment.
class Tokenizer {
 public:
  // Loads `dir`/tokenizer.json and, when present, `dir`/tokenizer_config.json. Errors name the
  // file and the JSON path of the problem (NotFound when tokenizer.json is missing,
  // InvalidArgument for content, naming the unsupported type when a part is not implemented).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFromDir(std::string_view dir);

  // Builds a tokenizer from the two files' contents; `tokenizer_config_json` may be empty.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view tokenizer_json, std::string_view tokenizer_config_json);

  // Token ids of `text` (any bytes; ill-formed UTF-8 becomes U+FFFD first). With
  // `add_special_tokens` the post-processor's tokens (BOS, ...) are added.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const;

  // The text of `ids`. Ids that name no token are skipped (as HF does); with
  // `skip_special_tokens` added tokens marked special are skipped too. Always well-formed UTF-8.
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const;

  // The id of a token string (added tokens first, then the model vocabulary).
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token string of `id` (model token, or added token: its normalized form when it is matched
  // on normalized text, as HF's id_to_token), or nullopt.
  std::optional<std::string> IdToToken(int32_t id) const;

  // One past the largest id of the model vocabulary and the added tokens: the number of rows an
  // embedding table needs.
  int32_t vocab_size() const { return vocab_size_; }

  // True when `id` is an added token marked special.
  bool IsSpecial(int32_t id) const;

  // BOS from tokenizer_config.json's bos_token; when that file names none, the single token the
  // post-processor puts before the sequence; nullopt otherwise.
  std::optional<int32_t> bos_token_id() const { return bos_token_id_; }
  // EOS ids from tokenizer_config.json's eos_token (a string or a list); the server adds
  // generation_config.json's eos ids itself.
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }
  // The BOS / EOS token strings for chat templates ("" when unset).
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

  // The decoder pipeline on token strings (the detokenizer uses it on windows of ids): the text
  // of `tokens`, already filtered for special tokens.
  std::string DecodeTokens(std::vector<std::string> tokens) const;
  // The token strings `Decode` would pass to the decoder for `ids`.
  void IdsToTokens(absl::Span<const int32_t> ids, bool skip_special_tokens,
                   std::vector<std::string>* tokens) const;

 private:
  Tokenizer() = default;
  absl::Status LoadConfig(std::string_view tokenizer_config_json);

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  AddedVocabulary added_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_token_id_;
  std::vector<int32_t> eos_token_ids_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace loom::text
