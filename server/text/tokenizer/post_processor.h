// Post-processors from tokenizer.json ("post_processor"): the special tokens added around an
// encoded sequence when the caller asks for special tokens.
//
// Implemented types: TemplateProcessing (the "single" template; "pair" is parsed for validity
// only, since loom encodes single sequences), ByteLevel (ids unchanged), RobertaProcessing and
// BertProcessing (cls, sequence, sep), Sequence. Anything else is refused at load time.
// Immutable; Process is const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/json.h"

namespace loom::text {

// The special tokens a post-processor puts around one sequence.
class PostProcessor {
 public:
  // Builds the post-processor that `json` describes; nullptr for JSON null.
  static absl::StatusOr<std::unique_ptr<PostProcessor>> FromJson(const Json& json);

  // A processor that puts `prefix` before and `suffix` after the sequence.
  PostProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}

  // Adds the special tokens around `ids` (called only when special tokens are requested).
  void Process(std::vector<int32_t>* ids) const;

  // The ids put before / after the sequence.
  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  // Every supported processor reduces, for a single sequence, to fixed ids before and after it.
  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

}  // namespace loom::text
