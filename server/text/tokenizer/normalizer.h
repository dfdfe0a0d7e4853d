// Normalizers from tokenizer.json ("normalizer"): text transformations applied to each piece of
// input between added tokens, before pre-tokenization.
//
// Implemented types: NFC, NFD, NFKC, NFKD, Prepend, Replace (String or Regex pattern), Lowercase,
// Strip, Sequence. Anything else is refused at load time with InvalidArgument naming the type.
// A Normalizer is immutable after loading; Normalize is const and thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/common/json.h"

namespace loom::text {

// One normalizer (or a Sequence of them).
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (well-formed UTF-8) in place.
  virtual void Normalize(std::string* text) const = 0;
};

// Builds the normalizer that `json` describes; nullptr (no normalizer) for JSON null.
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& json);

}  // namespace loom::text
