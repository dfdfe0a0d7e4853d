// Decoders from tokenizer.json ("decoder"): turn the token strings of an id sequence back into
// text.
//
// A decoder maps a list of token strings to another list (HF decode_chain); the final text is
// their concatenation. Implemented types: ByteLevel, ByteFallback, Fuse, Strip, Metaspace,
// Replace, BPEDecoder, Sequence; anything else is refused at load time. Decoders that depend on
// position (Metaspace drops its replacement in the first token, Strip cuts per token) see the
// whole list, so decoding a suffix of a sequence is not always a suffix of the whole decoding;
// the detokenizer accounts for that. Immutable; const and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/json.h"

namespace loom::text {

// One decoder (or a Sequence of them).
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites `tokens` in place.
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
};

// Builds the decoder that `json` describes; nullptr for JSON null.
absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& json);

}  // namespace loom::text
