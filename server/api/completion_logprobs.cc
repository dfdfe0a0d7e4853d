#include "server/api/completion_logprobs.h"

#include <cmath>
#include <cstdint>

#include "engine/common/utf8.h"

namespace loom::api {
namespace {

void Number(JsonWriter& w, float v) { w.Double(std::isfinite(v) ? v : -9999.0); }

}  // namespace

size_t CountCodePoints(std::string_view text) {
  size_t count = 0;
  for (size_t pos = 0; pos < text.size(); ++count) {
    size_t len = 1;
    DecodeUtf8(text, pos, &len);
    pos += len;
  }
  return count;
}

size_t EndOffset(const std::vector<CompletionTokenLogprob>& tokens, size_t first_offset) {
  size_t offset = first_offset;
  for (const CompletionTokenLogprob& t : tokens) offset += CountCodePoints(t.text);
  return offset;
}

void WriteCompletionLogprobs(JsonWriter& w, const std::vector<CompletionTokenLogprob>& tokens,
                             size_t first_offset) {
  w.BeginObject();
  w.Key("tokens");
  w.BeginArray();
  for (const CompletionTokenLogprob& t : tokens) w.String(t.text);
  w.EndArray();
  w.Key("token_logprobs");
  w.BeginArray();
  for (const CompletionTokenLogprob& t : tokens) {
    if (t.logprob.has_value()) {
      Number(w, *t.logprob);
    } else {
      w.Null();
    }
  }
  w.EndArray();
  w.Key("top_logprobs");
  w.BeginArray();
  for (const CompletionTokenLogprob& t : tokens) {
    if (!t.logprob.has_value()) {
      w.Null();
      continue;
    }
    w.BeginObject();
    for (const auto& [text, logprob] : t.top) {
      w.Key(text);
      Number(w, logprob);
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("text_offset");
  w.BeginArray();
  size_t offset = first_offset;
  for (const CompletionTokenLogprob& t : tokens) {
    w.Int(static_cast<int64_t>(offset));
    offset += CountCodePoints(t.text);
  }
  w.EndArray();
  w.EndObject();
}

}  // namespace loom::api
