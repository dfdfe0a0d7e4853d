#include "server/text/tokenizer/post_processor.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom::text {
namespace {

absl::Status Invalid(const Json& at, std::string_view message) {
  return absl::InvalidArgumentError(StrCat(at.path(), ": ", message));
}

// The ids of a [token, id] pair (RobertaProcessing / BertProcessing "cls" and "sep").
absl::StatusOr<int32_t> PairId(const Json& json, std::string_view key) {
  LOOM_ASSIGN_OR_RETURN(Json pair, json.Get(key));
  if (!pair.IsArray() || pair.size() != 2) return Invalid(pair, "expected [token, id]");
  LOOM_ASSIGN_OR_RETURN(int64_t id, pair[1].AsInt());
  if (id < 0 || id > (int64_t{1} << 24)) return Invalid(pair[1], "id out of range");
  return static_cast<int32_t>(id);
}

absl::StatusOr<std::unique_ptr<PostProcessor>> ParseTemplate(const Json& json) {
  LOOM_ASSIGN_OR_RETURN(Json single, json.Get("single"));
  if (!single.IsArray()) return Invalid(single, "expected an array of template pieces");
  std::optional<Json> specials = json.Find("special_tokens");
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const Json item = single[i];
    if (item.Has("Sequence")) {
      if (seen_sequence) return Invalid(item, "a single-sequence template names $A twice");
      seen_sequence = true;
      continue;
    }
    if (!item.Has("SpecialToken")) return Invalid(item, "expected SpecialToken or Sequence");
    LOOM_ASSIGN_OR_RETURN(Json special, item.Get("SpecialToken"));
    LOOM_ASSIGN_OR_RETURN(std::string name, special.GetString("id"));
    std::optional<Json> entry = specials ? specials->Find(name) : std::nullopt;
    if (!entry)
      return Invalid(item, StrCat("special token \"", name, "\" is not in special_tokens"));
    LOOM_ASSIGN_OR_RETURN(Json ids, entry->Get("ids"));
    if (!ids.IsArray()) return Invalid(ids, "expected an array of ids");
    for (size_t k = 0; k < ids.size(); ++k) {
      LOOM_ASSIGN_OR_RETURN(int64_t id, ids[k].AsInt());
      if (id < 0 || id > (int64_t{1} << 24)) return Invalid(ids[k], "id out of range");
      (seen_sequence ? suffix : prefix).push_back(static_cast<int32_t>(id));
    }
  }
  return std::make_unique<PostProcessor>(std::move(prefix), std::move(suffix));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessor::FromJson(const Json& json) {
  if (json.IsNull()) return nullptr;
  if (!json.IsObject()) return Invalid(json, "expected an object");
  LOOM_ASSIGN_OR_RETURN(std::string type, json.GetString("type"));
  if (type == "TemplateProcessing") return ParseTemplate(json);
  if (type == "ByteLevel")
    return std::make_unique<PostProcessor>(std::vector<int32_t>{}, std::vector<int32_t>{});
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    LOOM_ASSIGN_OR_RETURN(int32_t cls, PairId(json, "cls"));
    LOOM_ASSIGN_OR_RETURN(int32_t sep, PairId(json, "sep"));
    return std::make_unique<PostProcessor>(std::vector<int32_t>{cls}, std::vector<int32_t>{sep});
  }
  if (type == "Sequence") {
    LOOM_ASSIGN_OR_RETURN(Json list, json.Get("processors"));
    if (!list.IsArray()) return Invalid(list, "expected an array");
    std::vector<int32_t> prefix;
    std::vector<int32_t> suffix;
    for (size_t i = 0; i < list.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<PostProcessor> part, FromJson(list[i]));
      if (part == nullptr) continue;
      // Each later processor wraps the output of the earlier ones.
      prefix.insert(prefix.begin(), part->prefix_.begin(), part->prefix_.end());
      suffix.insert(suffix.end(), part->suffix_.begin(), part->suffix_.end());
    }
    return std::make_unique<PostProcessor>(std::move(prefix), std::move(suffix));
  }
  return Invalid(json, StrCat("post-processor type \"", type, "\" is not supported"));
}

void PostProcessor::Process(std::vector<int32_t>* ids) const {
  ids->insert(ids->begin(), prefix_.begin(), prefix_.end());
  ids->insert(ids->end(), suffix_.begin(), suffix_.end());
}

}  // namespace loom::text
