// ValidateCheckpoint: what an architecture expects against what a checkpoint holds.
#include "engine/weights/weight_spec.h"

#include <string>
#include <vector>

#include "engine/common/strings.h"
#include "engine/weights/safetensors_writer.h"
#include "gtest/gtest.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

using testing_util::TempFolder;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

struct FileTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Opens a checkpoint of zero-filled tensors written to `folder`/model.safetensors.
Checkpoint MakeCheckpoint(const TempFolder& folder, const std::vector<FileTensor>& specs) {
  std::vector<TensorToWrite> tensors;
  for (const FileTensor& spec : specs) {
    int64_t num_bytes = static_cast<int64_t>(DTypeSize(spec.dtype));
    for (int64_t dim : spec.shape) num_bytes *= dim;
    tensors.push_back({.name = spec.name,
                       .dtype = spec.dtype,
                       .shape = spec.shape,
                       .produce = [num_bytes](const ByteSink& sink) {
                         const std::vector<char> zeros(num_bytes, 0);
                         return sink(zeros.data(), zeros.size());
                       }});
  }
  const absl::Status written = WriteSafetensors(folder.File("model.safetensors"), tensors);
  EXPECT_TRUE(written.ok()) << written;
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(folder.path());
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return *std::move(checkpoint);
}

const std::vector<FileTensor> kLlamaLike = {
    {"model.embed_tokens.weight", DType::kBF16, {64, 32}},
    {"model.layers.0.self_attn.q_proj.weight", DType::kBF16, {32, 32}},
    {"model.norm.weight", DType::kF32, {32}},
    {"lm_head.weight", DType::kF16, {64, 32}},
};

const std::vector<ExpectedTensor> kExpected = {
    {"model.embed_tokens.weight", {64, 32}},
    {"model.layers.0.self_attn.q_proj.weight", {32, 32}},
    {"model.norm.weight", {32}},
    {"lm_head.weight", {64, 32}, /*required=*/false},
};

TEST(WeightSpecTest, MatchingCheckpointPasses) {
  TempFolder folder;
  const Checkpoint checkpoint = MakeCheckpoint(folder, kLlamaLike);
  absl::StatusOr<std::vector<std::string>> unexpected = ValidateCheckpoint(checkpoint, kExpected);
  ASSERT_TRUE(unexpected.ok()) << unexpected.status();
  EXPECT_TRUE(unexpected->empty()) << unexpected->front();
}

TEST(WeightSpecTest, OptionalTensorMayBeAbsent) {
  TempFolder folder;
  std::vector<FileTensor> tied(kLlamaLike.begin(), kLlamaLike.end() - 1);  // no lm_head
  const Checkpoint checkpoint = MakeCheckpoint(folder, tied);
  EXPECT_TRUE(ValidateCheckpoint(checkpoint, kExpected).ok());
}

TEST(WeightSpecTest, UnexpectedTensorsAreReturnedNotRefused) {
  TempFolder folder;
  std::vector<FileTensor> extra = kLlamaLike;
  extra.push_back({"model.rotary_emb.inv_freq", DType::kF32, {16}});
  extra.push_back({"a.extra", DType::kI64, {1}});
  const Checkpoint checkpoint = MakeCheckpoint(folder, extra);
  absl::StatusOr<std::vector<std::string>> unexpected = ValidateCheckpoint(checkpoint, kExpected);
  ASSERT_TRUE(unexpected.ok()) << unexpected.status();
  EXPECT_EQ(*unexpected, (std::vector<std::string>{"a.extra", "model.rotary_emb.inv_freq"}));
}

TEST(WeightSpecTest, ReportsMissingWrongShapeAndWrongDTypeTogether) {
  TempFolder folder;
  const Checkpoint checkpoint =
      MakeCheckpoint(folder, {{"model.embed_tokens.weight", DType::kBF16, {64, 33}},
                              {"model.norm.weight", DType::kI32, {32}},
                              {"lm_head.weight", DType::kF16, {64}}});
  const absl::Status status = ValidateCheckpoint(checkpoint, kExpected).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::string message = Message(status);
  const std::string file = folder.File("model.safetensors");
  LOOM_EXPECT_CONTAINS(message, "4 problems");
  LOOM_EXPECT_CONTAINS(message, file +
                                    ": tensor 'model.embed_tokens.weight': expected shape "
                                    "[64, 32], found [64, 33]");
  LOOM_EXPECT_CONTAINS(message, "missing tensor 'model.layers.0.self_attn.q_proj.weight'");
  LOOM_EXPECT_CONTAINS(message, file + ": tensor 'model.norm.weight': dtype I32");
  // Optional but present: its shape is still checked.
  LOOM_EXPECT_CONTAINS(message, "'lm_head.weight': expected shape [64, 32], found [64]");
}

TEST(WeightSpecTest, LongReportsAreCut) {
  TempFolder folder;
  const Checkpoint checkpoint = MakeCheckpoint(folder, {{"present", DType::kF32, {1}}});
  std::vector<ExpectedTensor> expected;
  for (int i = 0; i < 25; ++i) expected.push_back({StrCat("w", 100 + i), {1}});
  const absl::Status status = ValidateCheckpoint(checkpoint, expected).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(Message(status), "25 problems");
  LOOM_EXPECT_CONTAINS(Message(status), "'w109'");
  LOOM_EXPECT_NOT_CONTAINS(Message(status), "'w110'");
  LOOM_EXPECT_CONTAINS(Message(status), "... and 15 more");
}

}  // namespace
}  // namespace loom
