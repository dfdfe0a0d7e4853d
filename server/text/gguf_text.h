// The tokenizer and chat template of a GGUF file (llama.cpp / Ollama), built as Hugging Face
// transformers builds them for `AutoTokenizer.from_pretrained(dir, gguf_file=name)`.
//
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
//   ModelText text = ModelTextFromGguf(*file);
//
// Formats as data: the metadata (gguf_vocab.h) is turned into the tokenizer.json and
// tokenizer_config.json documents transformers would hold in memory, which Tokenizer::FromJson
// loads like any other; nothing in the tokenizer knows it came from a GGUF file.
//
// What transformers does, and so what this does (tokenizer.ggml.model picks the shape):
//   gpt2   byte-level BPE with the file's merges. Tokens not written in the GPT-2 byte alphabet
//          are respelled into it. tokenizer.ggml.pre picks the split regex from transformers'
//          table (llama-bpe/llama3, qwen2, tekken, gpt-4o, qwen35, ...); any other name keeps
//          GPT-2's ByteLevel regex ("default" and "gpt2" silently, others with a warning, since
//          llama.cpp may split differently, e.g. smollm).
//   llama  SentencePiece-style BPE with byte fallback (<0xNN>), Metaspace "▁" prepended to the
//          first word (tokenizer.ggml.add_space_prefix is ignored, as transformers ignores it),
//          merges from the file or derived from tokenizer.ggml.scores (GenerateMerges); phi3
//          files prepend "▁" with a normalizer instead; gemma/gemma2/gemma3 files (and the
//          gemma4 model) get Gemma's normalizer, split and decoder.
//   Control tokens (type 3) become special added tokens (in a gpt2 vocabulary only those written
//   in the byte alphabet), user-defined ones (type 4) plain added tokens; bos/eos/unk/pad become
//   special tokens; add_bos_token (default true for llama vocabularies) / add_eos_token build the
//   post-processor. The chat template sees bos/eos/unk/pad as their token strings.
// Beyond transformers: the end-of-turn and end-of-message tokens (tokenizer.ggml.eot_token_id,
// eom_token_id) are added to the tokenizer's eos_token_ids, so generation stops on them as
// llama.cpp does.
//
// Any other tokenizer.ggml.model (t5, bert, rwkv, ...) is Unimplemented, naming it. Pure
// functions; any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/weights/gguf.h"
#include "server/text/chat_template.h"
#include "server/text/gguf_vocab.h"
#include "server/text/model_text.h"
#include "server/text/tokenizer/tokenizer.h"

namespace loom::text {

// The two documents transformers would hold for this vocabulary.
struct GgufTokenizerJson {
  std::string tokenizer_json;
  std::string tokenizer_config_json;  // bos/eos/unk/pad tokens, add_bos/add_eos flags
  std::vector<std::string> warnings;  // e.g. an unknown tokenizer.ggml.pre
};

// Builds the documents; InvalidArgument for metadata that contradicts itself (a merge that is not
// "left right"), Unimplemented for a tokenizer model loom does not run.
absl::StatusOr<GgufTokenizerJson> TokenizerJsonFromGguf(const GgufVocab& vocab);

// The tokenizer of `vocab`. Warnings (unknown pre-tokenizer, ignored ids) go to `warnings`.
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufVocab& vocab,
                                                             std::vector<std::string>* warnings);

// The chat template of `vocab` with its special-token strings; NotFound when the file has none.
absl::StatusOr<ChatTemplate> ChatTemplateFromGguf(const GgufVocab& vocab);

// Both, as LoadModelText gives them for a GGUF file; warnings are logged.
ModelText ModelTextFromGguf(const GgufFile& file);

}  // namespace loom::text
