#include "server/text/gguf_text.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "engine/common/strings.h"
#include "engine/common/json_writer.h"
#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/utf8.h"
#include "server/text/tokenizer/byte_level.h"

namespace loom::text {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"

// transformers' GGUF_PRE_TOKENIZER_SPLITS (integrations/gguf/gguf_tokenizer_mapping.py).
constexpr std::string_view kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N})"
    R"(| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kTekkenSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4oSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreSplit {
  std::string_view pre;
  std::string_view regex;
};
constexpr PreSplit kPreSplits[] = {
    {"llama3", kLlama3Split},     {"llama-v3", kLlama3Split},   {"llama-bpe", kLlama3Split},
    {"falcon3", kLlama3Split},    {"falcon-h1", kLlama3Split},  {"pixtral", kLlama3Split},
    {"midm-2.0", kLlama3Split},   {"lfm2", kLlama3Split},       {"jina-v5-nano", kLlama3Split},
    {"dbrx", kLlama3Split},       {"smaug-bpe", kLlama3Split},  {"tekken", kTekkenSplit},
    {"qwen2", kQwen2Split},       {"deepseek-r1-qwen", kQwen2Split}, {"kormo", kQwen2Split},
    {"f2llmv2", kQwen2Split},     {"megrez", kQwen2Split},      {"qwen35", kQwen35Split},
    {"gpt-4o", kGpt4oSplit},      {"llama4", kGpt4oSplit},      {"kanana2", kGpt4oSplit},
    {"talkie", kGpt4oSplit},      {"minimax-m2", kGpt4oSplit},
};

std::optional<std::string_view> PreSplitRegex(std::string_view pre) {
  for (const PreSplit& p : kPreSplits) {
    if (p.pre == pre) return p.regex;
  }
  return std::nullopt;
}

// Which transformers builder a file gets (select_tokenizer_builder).
enum class Shape { kByteLevel, kSentencePiece, kPhi3, kGemma, kGemma4 };

absl::StatusOr<Shape> SelectShape(const GgufVocab& vocab) {
  if (vocab.model == "llama") {
    const std::string_view arch = vocab.architecture;
    if (arch == "gemma" || arch == "gemma2" || arch == "gemma3") return Shape::kGemma;
    if (arch == "phi3") return Shape::kPhi3;
    return Shape::kSentencePiece;
  }
  if (vocab.model == "gpt2") return Shape::kByteLevel;
  if (vocab.model == "gemma4") return Shape::kGemma4;
  return absl::UnimplementedError(
      StrCat("tokenizer.ggml.model \"", vocab.model,
                   "\" is not supported (supported: gpt2, llama, gemma4)"));
}

// True when every code point of `token` is in the GPT-2 byte alphabet.
bool InByteAlphabet(std::string_view token) {
  for (size_t pos = 0; pos < token.size();) {
    size_t len = 1;
    const char32_t cp = DecodeUtf8(token, pos, &len);
    if (ByteLevelByte(cp) < 0) return false;
    pos += len;
  }
  return true;
}

// Python's str.isspace for one code point (what `not t.strip()` tests).
bool IsPythonSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// gemma_tokenizer's respelling: a token of whitespace that contains a space becomes one "▁" per
// code point; empty when `token` is not such a token.
std::string GemmaSpaces(std::string_view token) {
  if (token.find(' ') == std::string_view::npos) return "";
  std::string out;
  for (size_t pos = 0; pos < token.size();) {
    size_t len = 1;
    if (!IsPythonSpace(DecodeUtf8(token, pos, &len))) return "";
    pos += len;
    out += kMetaspace;
  }
  return out;
}

// The tokens as the builder spells them in its model vocabulary.
std::vector<std::string> SpellTokens(const GgufVocab& vocab, Shape shape) {
  std::vector<std::string> spelled;
  spelled.reserve(vocab.tokens.size());
  for (std::string_view token : vocab.tokens) {
    std::string s;
    if (shape == Shape::kByteLevel && !InByteAlphabet(token)) {
      AppendByteLevel(token, &s);
    } else if (shape == Shape::kGemma) {
      s = GemmaSpaces(token);
      if (s.empty()) s = token;
    } else {
      s = token;
    }
    spelled.push_back(std::move(s));
  }
  return spelled;
}

using Vocab = absl::flat_hash_map<std::string, int32_t>;

// The model vocabulary: token -> id, the last id where two tokens are spelled alike (a Python
// dict comprehension keeps the last).
Vocab ModelVocab(const std::vector<std::string>& spelled) {
  Vocab out;
  out.reserve(spelled.size());
  for (size_t i = 0; i < spelled.size(); ++i) out[spelled[i]] = static_cast<int32_t>(i);
  return out;
}

// The added tokens, as HF tokenizers' AddedVocabulary assigns them: a token of the model
// vocabulary keeps its id, a new one gets the next id past both; adding a token again updates
// its flags.
class AddedTokens {
 public:
  struct Entry {
    std::string content;
    int32_t id;
    bool special;
  };

  explicit AddedTokens(const Vocab& vocab) : vocab_(vocab) {}

  void Add(std::string_view content, bool special) {
    if (content.empty()) return;
    if (auto it = index_.find(AbslView(content)); it != index_.end()) {
      entries_[it->second].special = special;
      return;
    }
    int32_t id;
    if (auto v = vocab_.find(AbslView(content)); v != vocab_.end()) {
      id = v->second;
    } else {
      const int32_t vocab_len = static_cast<int32_t>(vocab_.size());
      id = vocab_len;
      if (!entries_.empty()) {
        int32_t max_id = 0;
        for (const Entry& e : entries_) max_id = std::max(max_id, e.id);
        if (max_id >= vocab_len || vocab_len == 0) id = max_id + 1;
      }
    }
    index_.emplace(std::string(content), entries_.size());
    entries_.push_back({std::string(content), id, special});
  }

  bool Has(std::string_view content) const { return index_.contains(AbslView(content)); }

  // The id of `content`: added tokens first, then the model vocabulary.
  std::optional<int32_t> Id(std::string_view content) const {
    if (auto it = index_.find(AbslView(content)); it != index_.end()) return entries_[it->second].id;
    if (auto v = vocab_.find(AbslView(content)); v != vocab_.end()) return v->second;
    return std::nullopt;
  }

  // By id, as tokenizer.json lists them.
  std::vector<Entry> Sorted() const {
    std::vector<Entry> out = entries_;
    std::stable_sort(out.begin(), out.end(),
                     [](const Entry& a, const Entry& b) { return a.id < b.id; });
    return out;
  }

 private:
  const Vocab& vocab_;
  std::vector<Entry> entries_;
  absl::flat_hash_map<std::string, size_t> index_;
};

// The special tokens the file names, as strings (nullopt when it names none).
struct NamedTokens {
  std::optional<std::string> bos, eos, unk, pad, eot, eom;
};

NamedTokens Named(const GgufVocab& vocab) {
  auto token = [&](std::optional<int32_t> id) -> std::optional<std::string> {
    if (!id) return std::nullopt;
    return std::string(vocab.tokens[static_cast<size_t>(*id)]);
  };
  return {token(vocab.bos_id), token(vocab.eos_id), token(vocab.unk_id),
          token(vocab.pad_id), token(vocab.eot_id), token(vocab.eom_id)};
}

// The added tokens: the builder class's own special tokens, the file's control and user-defined
// tokens (add_gguf_special_tokens), then the file's bos/eos/unk/pad (TokenizersBackend.__init__).
void AddTokens(const GgufVocab& vocab, Shape shape, const NamedTokens& named, AddedTokens& added) {
  // The builder's defaults, in SPECIAL_TOKENS_ATTRIBUTES order (bos, eos, unk, sep, pad, cls,
  // mask).
  std::vector<std::string_view> defaults;
  switch (shape) {
    case Shape::kByteLevel:
      defaults = {"<|endoftext|>"};
      break;
    case Shape::kSentencePiece:
    case Shape::kPhi3:
      defaults = {"<s>", "</s>", "<unk>"};
      break;
    case Shape::kGemma:
    case Shape::kGemma4:
      defaults = {"<bos>", "<eos>", "<unk>", "<pad>", "<mask>"};
      break;
  }
  for (std::string_view t : defaults) {
    if (!added.Has(t)) added.Add(t, /*special=*/true);
  }
  const size_t num_typed = std::min(vocab.tokens.size(), vocab.token_types.size());
  for (size_t i = 0; i < num_typed; ++i) {
    if (vocab.token_types[i] != static_cast<int32_t>(GgufTokenType::kControl)) continue;
    // In a byte-level vocabulary a control token outside the byte alphabet is a mislabel.
    if (shape == Shape::kByteLevel && !InByteAlphabet(vocab.tokens[i])) continue;
    added.Add(vocab.tokens[i], /*special=*/true);
  }
  for (size_t i = 0; i < num_typed; ++i) {
    if (vocab.token_types[i] != static_cast<int32_t>(GgufTokenType::kUserDefined)) continue;
    if (!added.Id(vocab.tokens[i])) continue;  // only tokens of the (spelled) vocabulary
    added.Add(vocab.tokens[i], /*special=*/false);
  }
  for (const std::optional<std::string>* t : {&named.bos, &named.eos, &named.unk, &named.pad}) {
    if (*t && !added.Has(**t)) added.Add(**t, /*special=*/true);
  }
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Merges(
    const GgufVocab& vocab, Shape shape, const std::vector<std::string>& spelled) {
  std::vector<std::pair<std::string, std::string>> merges;
  if (vocab.has_merges) {
    merges.reserve(vocab.merges.size());
    for (size_t i = 0; i < vocab.merges.size(); ++i) {
      const std::string_view m = vocab.merges[i];
      const size_t space = m.find(' ');
      if (space == std::string_view::npos || m.find(' ', space + 1) != std::string_view::npos) {
        return absl::InvalidArgumentError(StrCat(
            "tokenizer.ggml.merges[", i, "]: expected \"left right\" (one space), got \"", m, "\""));
      }
      merges.emplace_back(std::string(m.substr(0, space)), std::string(m.substr(space + 1)));
    }
    return merges;
  }
  if (shape == Shape::kByteLevel) {
    return absl::InvalidArgumentError("a gpt2 tokenizer needs tokenizer.ggml.merges");
  }
  std::vector<std::string_view> tokens(spelled.begin(), spelled.end());
  if (shape == Shape::kGemma) {
    // Gemma's scores do not follow its merge order; the order of the tokens does.
    std::vector<double> positions(tokens.size());
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = -static_cast<double>(i);
    return GenerateMerges(tokens, positions);
  }
  if (vocab.scores.empty()) {
    return absl::InvalidArgumentError(
        "a SentencePiece tokenizer needs tokenizer.ggml.merges or tokenizer.ggml.scores");
  }
  return GenerateMerges(tokens, vocab.scores);
}

void WriteString(JsonWriter& w, std::string_view key, std::string_view value) {
  w.Key(key);
  w.String(value);
}

void WriteReplace(JsonWriter& w, std::string_view pattern, std::string_view content) {
  w.BeginObject();
  WriteString(w, "type", "Replace");
  w.Key("pattern");
  w.BeginObject();
  WriteString(w, "String", pattern);
  w.EndObject();
  WriteString(w, "content", content);
  w.EndObject();
}

void WriteNormalizer(JsonWriter& w, Shape shape) {
  w.Key("normalizer");
  if (shape == Shape::kPhi3) {
    w.BeginObject();
    WriteString(w, "type", "Sequence");
    w.Key("normalizers");
    w.BeginArray();
    w.BeginObject();
    WriteString(w, "type", "Prepend");
    WriteString(w, "prepend", kMetaspace);
    w.EndObject();
    WriteReplace(w, " ", kMetaspace);
    w.EndArray();
    w.EndObject();
  } else if (shape == Shape::kGemma || shape == Shape::kGemma4) {
    WriteReplace(w, " ", kMetaspace);
  } else {
    w.Null();
  }
}

void WriteByteLevel(JsonWriter& w, bool use_regex) {
  w.BeginObject();
  WriteString(w, "type", "ByteLevel");
  w.Key("add_prefix_space");
  w.Bool(false);
  w.Key("trim_offsets");
  w.Bool(true);
  w.Key("use_regex");
  w.Bool(use_regex);
  w.EndObject();
}

void WritePreTokenizer(JsonWriter& w, const GgufVocab& vocab, Shape shape,
                       std::vector<std::string>& warnings) {
  w.Key("pre_tokenizer");
  // set_split_regex applies to every model type.
  if (std::optional<std::string_view> regex = PreSplitRegex(vocab.pre)) {
    w.BeginObject();
    WriteString(w, "type", "Sequence");
    w.Key("pretokenizers");
    w.BeginArray();
    w.BeginObject();
    WriteString(w, "type", "Split");
    w.Key("pattern");
    w.BeginObject();
    WriteString(w, "Regex", *regex);
    w.EndObject();
    WriteString(w, "behavior", "Isolated");
    w.Key("invert");
    w.Bool(false);
    w.EndObject();
    WriteByteLevel(w, /*use_regex=*/false);
    w.EndArray();
    w.EndObject();
    return;
  }
  switch (shape) {
    case Shape::kByteLevel:
      if (!vocab.pre.empty() && vocab.pre != "default" && vocab.pre != "gpt2") {
        warnings.push_back(StrCat(
            "tokenizer.ggml.pre \"", vocab.pre,
            "\" has no split regex in transformers' table; using GPT-2's byte-level split as "
            "transformers does (llama.cpp may split this vocabulary differently)"));
      }
      WriteByteLevel(w, /*use_regex=*/true);
      break;
    case Shape::kSentencePiece:
      w.BeginObject();
      WriteString(w, "type", "Metaspace");
      WriteString(w, "replacement", kMetaspace);
      WriteString(w, "prepend_scheme", "first");
      w.Key("split");
      w.Bool(false);
      w.EndObject();
      break;
    case Shape::kPhi3:
      w.Null();
      break;
    case Shape::kGemma:
    case Shape::kGemma4:
      w.BeginObject();
      WriteString(w, "type", "Split");
      w.Key("pattern");
      w.BeginObject();
      WriteString(w, "String", " ");
      w.EndObject();
      WriteString(w, "behavior", "MergedWithPrevious");
      w.Key("invert");
      w.Bool(false);
      w.EndObject();
      break;
  }
}

void WriteDecoder(JsonWriter& w, Shape shape) {
  w.Key("decoder");
  if (shape == Shape::kByteLevel) {
    w.BeginObject();
    WriteString(w, "type", "ByteLevel");
    w.Key("add_prefix_space");
    w.Bool(true);
    w.Key("trim_offsets");
    w.Bool(true);
    w.Key("use_regex");
    w.Bool(true);
    w.EndObject();
    return;
  }
  w.BeginObject();
  WriteString(w, "type", "Sequence");
  w.Key("decoders");
  w.BeginArray();
  WriteReplace(w, kMetaspace, " ");
  w.BeginObject();
  WriteString(w, "type", "ByteFallback");
  w.EndObject();
  w.BeginObject();
  WriteString(w, "type", "Fuse");
  w.EndObject();
  if (shape == Shape::kSentencePiece || shape == Shape::kPhi3) {
    w.BeginObject();
    WriteString(w, "type", "Strip");
    WriteString(w, "content", " ");
    w.Key("start");
    w.Int(1);
    w.Key("stop");
    w.Int(0);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

// TemplateProcessing as update_post_processor builds it from add_bos_token / add_eos_token.
void WritePostProcessor(JsonWriter& w, const std::optional<std::string>& bos,
                        const std::optional<std::string>& eos, const AddedTokens& added) {
  struct Piece {
    std::string_view special;  // empty: the sequence
    std::string_view sequence;
    int type_id;
  };
  std::vector<Piece> single;
  std::vector<Piece> pair;
  for (int type_id = 0; type_id < 2; ++type_id) {
    std::vector<Piece>& out = pair;
    if (bos) out.push_back({*bos, "", type_id});
    out.push_back({"", type_id == 0 ? "A" : "B", type_id});
    if (eos) out.push_back({*eos, "", type_id});
    if (type_id == 0) single = pair;
  }
  auto write_pieces = [&](std::string_view key, const std::vector<Piece>& pieces) {
    w.Key(key);
    w.BeginArray();
    for (const Piece& p : pieces) {
      w.BeginObject();
      w.Key(p.special.empty() ? "Sequence" : "SpecialToken");
      w.BeginObject();
      WriteString(w, "id", p.special.empty() ? p.sequence : p.special);
      w.Key("type_id");
      w.Int(p.type_id);
      w.EndObject();
      w.EndObject();
    }
    w.EndArray();
  };
  w.Key("post_processor");
  w.BeginObject();
  WriteString(w, "type", "TemplateProcessing");
  write_pieces("single", single);
  write_pieces("pair", pair);
  w.Key("special_tokens");
  w.BeginObject();
  std::vector<std::string_view> written;
  for (const std::optional<std::string>* t : {&bos, &eos}) {
    if (!*t || std::find(written.begin(), written.end(), **t) != written.end()) continue;
    written.push_back(**t);
    w.Key(**t);
    w.BeginObject();
    WriteString(w, "id", **t);
    w.Key("ids");
    w.BeginArray();
    w.Int(added.Id(**t).value_or(0));
    w.EndArray();
    w.Key("tokens");
    w.BeginArray();
    w.String(**t);
    w.EndArray();
    w.EndObject();
  }
  w.EndObject();
  w.EndObject();
}

void WriteModel(JsonWriter& w, Shape shape, const std::vector<std::string>& spelled,
                const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges) {
  const bool byte_level = shape == Shape::kByteLevel;
  const bool gemma = shape == Shape::kGemma || shape == Shape::kGemma4;
  w.Key("model");
  w.BeginObject();
  WriteString(w, "type", "BPE");
  w.Key("dropout");
  w.Null();
  w.Key("unk_token");
  if (gemma) {
    w.String("<unk>");
  } else {
    w.Null();
  }
  w.Key("continuing_subword_prefix");
  if (byte_level) {
    w.String("");
  } else {
    w.Null();
  }
  w.Key("end_of_word_suffix");
  if (byte_level) {
    w.String("");
  } else {
    w.Null();
  }
  w.Key("fuse_unk");
  w.Bool(!byte_level);
  w.Key("byte_fallback");
  w.Bool(!byte_level);
  w.Key("ignore_merges");
  w.Bool(false);
  w.Key("vocab");
  w.BeginObject();
  for (size_t i = 0; i < spelled.size(); ++i) {
    // Where two tokens are spelled alike the later id holds the entry.
    if (vocab.at(spelled[i]) != static_cast<int32_t>(i)) continue;
    w.Key(spelled[i]);
    w.Int(static_cast<int64_t>(i));
  }
  w.EndObject();
  w.Key("merges");
  w.BeginArray();
  for (const auto& [left, right] : merges) {
    w.BeginArray();
    w.String(left);
    w.String(right);
    w.EndArray();
  }
  w.EndArray();
  w.EndObject();
}

void WriteOptionalString(JsonWriter& w, std::string_view key, const std::optional<std::string>& v) {
  w.Key(key);
  if (v) {
    w.String(*v);
  } else {
    w.Null();
  }
}

}  // namespace

absl::StatusOr<GgufTokenizerJson> TokenizerJsonFromGguf(const GgufVocab& vocab) {
  LOOM_ASSIGN_OR_RETURN(Shape shape, SelectShape(vocab));
  GgufTokenizerJson out;
  const std::vector<std::string> spelled = SpellTokens(vocab, shape);
  const Vocab model_vocab = ModelVocab(spelled);
  LOOM_ASSIGN_OR_RETURN(auto merges, Merges(vocab, shape, spelled));
  const NamedTokens named = Named(vocab);
  AddedTokens added(model_vocab);
  AddTokens(vocab, shape, named, added);

  // get_gguf_tokenizer: a llama vocabulary adds BOS unless the file says otherwise; gemma4's
  // reference adds none (its template writes <bos>). A flag without its token adds nothing.
  bool add_bos = vocab.add_bos.value_or(shape != Shape::kByteLevel && shape != Shape::kGemma4);
  if (shape == Shape::kGemma4) add_bos = false;
  const bool add_eos = vocab.add_eos.value_or(false);
  const std::optional<std::string> bos = add_bos ? named.bos : std::nullopt;
  const std::optional<std::string> eos = add_eos ? named.eos : std::nullopt;

  JsonWriter w;
  w.BeginObject();
  WriteString(w, "version", "1.0");
  w.Key("truncation");
  w.Null();
  w.Key("padding");
  w.Null();
  w.Key("added_tokens");
  w.BeginArray();
  for (const AddedTokens::Entry& e : added.Sorted()) {
    w.BeginObject();
    w.Key("id");
    w.Int(e.id);
    WriteString(w, "content", e.content);
    for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized"}) {
      w.Key(flag);
      w.Bool(false);
    }
    w.Key("special");
    w.Bool(e.special);
    w.EndObject();
  }
  w.EndArray();
  WriteNormalizer(w, shape);
  WritePreTokenizer(w, vocab, shape, out.warnings);
  WritePostProcessor(w, bos, eos, added);
  WriteDecoder(w, shape);
  WriteModel(w, shape, spelled, model_vocab, merges);
  w.EndObject();
  out.tokenizer_json = std::move(w).Take();

  JsonWriter c;
  c.BeginObject();
  WriteOptionalString(c, "bos_token", named.bos);
  // EOS first, then end of turn / end of message: the tokenizer's eos_token_ids stop generation.
  std::vector<std::string> eos_list;
  for (const std::optional<std::string>* t : {&named.eos, &named.eot, &named.eom}) {
    if (*t && std::find(eos_list.begin(), eos_list.end(), **t) == eos_list.end()) {
      eos_list.push_back(**t);
    }
  }
  c.Key("eos_token");
  c.BeginArray();
  for (const std::string& t : eos_list) c.String(t);
  c.EndArray();
  WriteOptionalString(c, "unk_token", named.unk);
  WriteOptionalString(c, "pad_token", named.pad);
  c.Key("add_bos_token");
  c.Bool(bos.has_value());
  c.Key("add_eos_token");
  c.Bool(eos.has_value());
  c.EndObject();
  out.tokenizer_config_json = std::move(c).Take();
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufVocab& vocab,
                                                             std::vector<std::string>* warnings) {
  LOOM_ASSIGN_OR_RETURN(GgufTokenizerJson docs, TokenizerJsonFromGguf(vocab));
  if (warnings != nullptr) {
    warnings->insert(warnings->end(), docs.warnings.begin(), docs.warnings.end());
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::FromJson(docs.tokenizer_json, docs.tokenizer_config_json);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        StrCat("tokenizer built from GGUF metadata: ",
                                     tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<ChatTemplate> ChatTemplateFromGguf(const GgufVocab& vocab) {
  if (!vocab.chat_template) return absl::NotFoundError("no tokenizer.chat_template");
  const NamedTokens named = Named(vocab);
  SpecialTokens tokens;
  tokens.bos_token = named.bos;
  tokens.eos_token = named.eos;
  tokens.unk_token = named.unk;
  tokens.pad_token = named.pad;
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromSource(*vocab.chat_template, tokens);
  if (!chat.ok()) {
    return absl::Status(chat.status().code(),
                        StrCat("tokenizer.chat_template: ", chat.status().message()));
  }
  return chat;
}

ModelText ModelTextFromGguf(const GgufFile& file) {
  ModelText t;
  absl::StatusOr<GgufVocab> vocab = ReadGgufVocab(file);
  if (!vocab.ok()) {
    t.tokenizer_status = vocab.status();
    t.chat_status = vocab.status();
    return t;
  }
  std::vector<std::string> warnings = vocab->warnings;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = TokenizerFromGguf(*vocab, &warnings);
  for (const std::string& warning : warnings) LOOM_LOG(kWarning, file.path(), ": ", warning);
  if (tokenizer.ok()) {
    t.tokenizer = std::move(*tokenizer);
  } else {
    t.tokenizer_status = absl::Status(tokenizer.status().code(),
                                      StrCat(file.path(), ": ", tokenizer.status().message()));
  }
  absl::StatusOr<ChatTemplate> chat = ChatTemplateFromGguf(*vocab);
  if (chat.ok()) {
    t.chat = std::move(*chat);
  } else {
    t.chat_status = absl::Status(chat.status().code(),
                                 StrCat(file.path(), ": ", chat.status().message()));
  }
  return t;
}

}  // namespace loom::text
