// Validation of a checkpoint against the tensors an architecture expects, before any weight is
// used: every required tensor present, every present expected tensor with the expected shape and
// a float dtype (F32, F16 or BF16), or for matrices marked quantized_ok also a block-quantized
// format whose blocks tile each row. One call reports all problems at once (up to
// kMaxReportedProblems of them), so a wrong checkpoint is diagnosed in one run, not one error
// per restart.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/weights/checkpoint.h"

namespace loom {

// One tensor an architecture reads, as its model file lists it.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;  // exact dims, e.g. [vocab_size, hidden_size]
  bool required = true;        // false: may be absent (e.g. a bias or a tied lm_head.weight)
  // A matrix the engine multiplies by (or embeds from) may also be stored block-quantized
  // (q8_0, q4_k, ...: a GGUF file's formats); norms and biases must be float.
  bool quantized_ok = false;
};

// How many problems a validation error lists before "... and N more".
inline constexpr int kMaxReportedProblems = 10;

// Checks `checkpoint` against `expected`. On success returns the names of tensors the checkpoint
// has but `expected` does not list, sorted (the caller warns about them; they are not an
// error). Otherwise InvalidArgument listing missing required tensors, wrong shapes ("expected
// [64, 32], found [64, 33]") and non-float dtypes, each naming the tensor and its file.
absl::StatusOr<std::vector<std::string>> ValidateCheckpoint(
    const Checkpoint& checkpoint, std::span<const ExpectedTensor> expected);

}  // namespace loom
