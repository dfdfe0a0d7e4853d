#include "engine/weights/weight_spec.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "absl/status/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

// Problems with one expected tensor, appended to `problems`.
void CheckTensor(const Checkpoint& checkpoint, const ExpectedTensor& want,
                 std::vector<std::string>& problems) {
  const TensorInfo* found = checkpoint.Find(want.name);
  if (found == nullptr) {
    if (want.required) problems.push_back(StrCat("missing tensor '", want.name, "'"));
    return;
  }
  const std::string where = StrCat(found->file, ": tensor '", found->name, "': ");
  if (found->shape != want.shape) {
    problems.push_back(StrCat(where, "expected shape ", FormatShape(want.shape), ", found ",
                              FormatShape(found->shape)));
  }
  if (want.quantized_ok && IsQuantizedDType(found->dtype)) {
    if (found->shape.empty() || !RowFitsBlocks(found->dtype, found->shape.back())) {
      problems.push_back(StrCat(where, "rows of ", FormatShape(found->shape), " are not whole ",
                                DTypeName(found->dtype), " blocks"));
    }
  } else if (!IsFloatDType(found->dtype)) {
    const std::string_view expected = want.quantized_ok
                                          ? ", expected F32, F16, BF16 or a block-quantized format"
                                          : ", expected F32, F16 or BF16";
    problems.push_back(StrCat(where, "dtype ", SafetensorsDTypeName(found->dtype), expected));
  }
}

std::string Report(const Checkpoint& checkpoint, const std::vector<std::string>& problems) {
  std::string message =
      StrCat("checkpoint ", checkpoint.path(), " does not match the architecture (",
             problems.size(), problems.size() == 1 ? " problem):" : " problems):");
  const size_t shown = std::min<size_t>(problems.size(), kMaxReportedProblems);
  for (size_t i = 0; i < shown; ++i) message += StrCat("\n  ", problems[i]);
  if (problems.size() > shown) message += StrCat("\n  ... and ", problems.size() - shown, " more");
  return message;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ValidateCheckpoint(
    const Checkpoint& checkpoint, std::span<const ExpectedTensor> expected) {
  std::vector<std::string> problems;
  std::set<std::string_view> expected_names;
  for (const ExpectedTensor& want : expected) {
    if (!expected_names.insert(want.name).second) continue;  // listed twice: check once
    CheckTensor(checkpoint, want, problems);
  }
  if (!problems.empty()) return absl::InvalidArgumentError(Report(checkpoint, problems));
  std::vector<std::string> unexpected;
  for (const TensorInfo* tensor : checkpoint.tensors()) {
    if (!expected_names.contains(tensor->name)) unexpected.push_back(tensor->name);
  }
  return unexpected;
}

}  // namespace loom
