// The `logprobs` object of a /v1/completions choice (OpenAI's legacy shape, as vLLM writes it):
//
//   {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{text: logprob}, ...],
//    "text_offset": [...]}
//
// With `echo`, the prompt's tokens come first: the first prompt token has no score (nothing
// precedes it), so its `token_logprobs` and `top_logprobs` entries are null; then the prompt's
// other tokens, then the generated ones. `text_offset` counts Unicode code points (what a JSON
// client sees as string length), not UTF-8 bytes: each token starts where the previous one's text
// ends, beginning at the offset the caller gives (0 for a whole choice; in a stream, where the
// choice's earlier chunks ended). A token's text is what the tokenizer decodes for it alone, so a
// special token (BOS) counts its own text even where the echoed prompt does not show it.
//
// Pure functions; any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/common/json_writer.h"

namespace loom::api {

// One token of a completion's `logprobs`.
struct CompletionTokenLogprob {
  std::string text;  // the token decoded alone
  // Natural log; absent for a prompt token nothing scores (the first one).
  std::optional<float> logprob;
  // The most likely tokens at this position, most likely first; not written when `logprob` is
  // absent (the entry is null).
  std::vector<std::pair<std::string, float>> top;
};

// Code points of `text` as a JSON writer emits it: each maximal ill-formed UTF-8 subpart counts
// as the one U+FFFD it becomes.
size_t CountCodePoints(std::string_view text);

// Where the text after `tokens` starts, given where the first token starts.
size_t EndOffset(const std::vector<CompletionTokenLogprob>& tokens, size_t first_offset);

// Writes the `logprobs` object for `tokens`, the first starting at `first_offset` code points.
// A log-probability that is not finite (-inf: a token the model cannot produce) is written as
// -9999.0, as OpenAI and vLLM do: JSON has no infinity.
void WriteCompletionLogprobs(JsonWriter& w, const std::vector<CompletionTokenLogprob>& tokens,
                             size_t first_offset);

}  // namespace loom::api
