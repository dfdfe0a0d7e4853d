#include "server/text/tokenizer/tokenizer.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "engine/common/file.h"
#include "engine/common/json.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/common/utf8.h"

namespace loom::text {
namespace {

// Largest tokenizer.json / tokenizer_config.json accepted (real ones are a few tens of MB).
constexpr int64_t kMaxTokenizerFileBytes = int64_t{1} << 30;

// A content error of `file` (a missing key is a content error too: InvalidArgument).
absl::Status Annotate(const absl::Status& status, std::string_view file) {
  return absl::InvalidArgumentError(StrCat(file, ": ", status.message()));
}

// A token in tokenizer_config.json: a string, or an object with "content" (AddedToken form).
absl::StatusOr<std::optional<std::string>> ConfigToken(const Json& config, std::string_view key) {
  std::optional<Json> value = config.Find(key);
  if (!value || value->IsNull()) return std::optional<std::string>();
  if (value->IsString()) {
    LOOM_ASSIGN_OR_RETURN(std::string s, value->AsString());
    return std::optional<std::string>(std::move(s));
  }
  if (value->IsObject()) {
    LOOM_ASSIGN_OR_RETURN(std::string s, value->GetString("content"));
    return std::optional<std::string>(std::move(s));
  }
  return absl::InvalidArgumentError(StrCat(value->path(), ": expected a string or an object"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFromDir(std::string_view dir) {
  const std::string json_path = StrCat(dir, "/tokenizer.json");
  const std::string config_path = StrCat(dir, "/tokenizer_config.json");
  LOOM_ASSIGN_OR_RETURN(std::string json, ReadFile(json_path, kMaxTokenizerFileBytes));
  std::string config;
  if (FileExists(config_path)) {
    LOOM_ASSIGN_OR_RETURN(config, ReadFile(config_path, kMaxTokenizerFileBytes));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = FromJson(json, config);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(), StrCat(dir, "/", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  // Parse errors already name the file.
  absl::StatusOr<Json> parsed = Json::Parse(tokenizer_json, "tokenizer.json");
  if (!parsed.ok()) return absl::InvalidArgumentError(parsed.status().message());
  absl::Status status = [&]() -> absl::Status {
    const Json& root = *parsed;
    if (!root.IsObject()) return absl::InvalidArgumentError("expected a JSON object");
    LOOM_ASSIGN_OR_RETURN(const Json null_json, Json::Parse("null"));
    // A missing part reads as null (absent).
    auto member = [&](std::string_view key) { return root.Find(key).value_or(null_json); };
    LOOM_ASSIGN_OR_RETURN(tok->normalizer_, ParseNormalizer(member("normalizer")));
    LOOM_ASSIGN_OR_RETURN(tok->pre_tokenizer_, ParsePreTokenizer(member("pre_tokenizer")));
    LOOM_ASSIGN_OR_RETURN(Json model, root.Get("model"));
    LOOM_ASSIGN_OR_RETURN(tok->model_, BpeModel::FromJson(model));
    LOOM_ASSIGN_OR_RETURN(tok->post_processor_, PostProcessor::FromJson(member("post_processor")));
    LOOM_ASSIGN_OR_RETURN(tok->decoder_, ParseDecoder(member("decoder")));
    LOOM_ASSIGN_OR_RETURN(
        tok->added_, AddedVocabulary::FromJson(member("added_tokens"), tok->normalizer_.get()));
    return absl::OkStatus();
  }();
  if (!status.ok()) return Annotate(status, "tokenizer.json");
  tok->vocab_size_ = tok->model_->id_end();
  for (const AddedToken& token : tok->added_.tokens()) {
    tok->vocab_size_ = std::max(tok->vocab_size_, token.id + 1);
  }
  if (tok->post_processor_ != nullptr) {
    const PostProcessor& post = *tok->post_processor_;
    for (const std::vector<int32_t>* ids : {&post.prefix(), &post.suffix()}) {
      for (int32_t id : *ids) {
        if (id >= tok->vocab_size_) {
          return absl::InvalidArgumentError(StrCat("tokenizer.json: post_processor: token id ", id,
                                                   " is not in the vocabulary (", tok->vocab_size_,
                                                   " ids)"));
        }
      }
    }
  }
  status = tok->LoadConfig(tokenizer_config_json);
  if (!status.ok()) return Annotate(status, "tokenizer_config.json");
  // Without a bos_token in tokenizer_config.json, the one token the post-processor puts first.
  if (tok->bos_token_.empty() && tok->post_processor_ != nullptr &&
      tok->post_processor_->prefix().size() == 1) {
    tok->bos_token_id_ = tok->post_processor_->prefix()[0];
    tok->bos_token_ = tok->IdToToken(*tok->bos_token_id_).value_or("");
  }
  return tok;
}

absl::Status Tokenizer::LoadConfig(std::string_view tokenizer_config_json) {
  if (tokenizer_config_json.empty()) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(Json config, Json::Parse(tokenizer_config_json, "JSON"));
  if (!config.IsObject()) return absl::InvalidArgumentError("expected a JSON object");
  LOOM_ASSIGN_OR_RETURN(std::optional<std::string> bos, ConfigToken(config, "bos_token"));
  if (bos) {
    bos_token_ = *bos;
    bos_token_id_ = TokenToId(*bos);
  }
  std::optional<Json> eos = config.Find("eos_token");
  if (eos && eos->IsArray()) {
    for (size_t i = 0; i < eos->size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(std::string name, (*eos)[i].AsString());
      if (i == 0) eos_token_ = name;
      if (std::optional<int32_t> id = TokenToId(name)) eos_token_ids_.push_back(*id);
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(std::optional<std::string> name, ConfigToken(config, "eos_token"));
    if (name) {
      eos_token_ = *name;
      if (std::optional<int32_t> id = TokenToId(*name)) eos_token_ids_.push_back(*id);
    }
  }
  LOOM_ASSIGN_OR_RETURN(bool add_bos, config.GetBool("add_bos_token", false));
  LOOM_ASSIGN_OR_RETURN(bool add_eos, config.GetBool("add_eos_token", false));
  if (post_processor_ == nullptr && (add_bos || add_eos)) {
    std::vector<int32_t> prefix;
    std::vector<int32_t> suffix;
    if (add_bos && bos_token_id_) prefix.push_back(*bos_token_id_);
    if (add_eos && !eos_token_ids_.empty()) suffix.push_back(eos_token_ids_[0]);
    post_processor_ = std::make_unique<PostProcessor>(std::move(prefix), std::move(suffix));
  }
  return absl::OkStatus();
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::string sanitized;
  if (!IsValidUtf8(text)) {
    sanitized = SanitizeUtf8(text);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> segments;
  added_.Split(text, &segments);
  std::vector<Piece> pieces;
  for (Segment& segment : segments) {
    if (segment.token_id.has_value()) {
      ids.push_back(*segment.token_id);
      continue;
    }
    pieces.clear();
    pieces.push_back(std::move(segment.piece));
    if (pre_tokenizer_ != nullptr) pre_tokenizer_->PreTokenize(&pieces);
    for (const Piece& piece : pieces) model_->Encode(piece.text, &ids);
  }
  if (add_special_tokens && post_processor_ != nullptr) post_processor_->Process(&ids);
  return ids;
}

void Tokenizer::IdsToTokens(absl::Span<const int32_t> ids, bool skip_special_tokens,
                            std::vector<std::string>* tokens) const {
  for (int32_t id : ids) {
    if (const AddedToken* added = added_.FindById(id)) {
      if (!(skip_special_tokens && added->special)) tokens->push_back(added->decoded);
      continue;
    }
    if (const std::string* token = model_->IdToToken(id)) tokens->push_back(*token);
  }
}

std::string Tokenizer::DecodeTokens(std::vector<std::string> tokens) const {
  std::string text;
  if (decoder_ == nullptr) {
    // No decoder: tokens joined by spaces, like the reference.
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
  } else {
    decoder_->DecodeChain(&tokens);
    for (const std::string& token : tokens) text += token;
  }
  return IsValidUtf8(text) ? text : SanitizeUtf8(text);
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  IdsToTokens(ids, skip_special_tokens, &tokens);
  return DecodeTokens(std::move(tokens));
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (const AddedToken* added = added_.FindByContent(token)) return added->id;
  return model_->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* added = added_.FindById(id)) return added->decoded;
  if (const std::string* token = model_->IdToToken(id)) return *token;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* added = added_.FindById(id);
  return added != nullptr && added->special;
}

}  // namespace loom::text
