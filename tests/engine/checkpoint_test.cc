// Checkpoint::Open on model folders: a single file, the one *.safetensors file, a sharded index,
// and the ways an index or a folder can be wrong.
#include "engine/weights/checkpoint.h"

#include <string>
#include <vector>

#include "engine/weights/safetensors_writer.h"
#include "gtest/gtest.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

using testing_util::TempFolder;
using testing_util::WriteBytes;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

const float kValues[8] = {0, 1, 2, 3, 4, 5, 6, 7};

// Writes an f32 file at `path` with tensors of the given names and shapes (values from kValues).
void WriteF32File(const std::string& path,
                  const std::vector<std::pair<std::string, std::vector<int64_t>>>& specs) {
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, shape] : specs) {
    tensors.push_back({.name = name, .dtype = DType::kF32, .shape = shape, .data = kValues});
  }
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok()) << path;
}

std::vector<std::string> Names(const Checkpoint& checkpoint) {
  std::vector<std::string> names;
  for (const TensorInfo* tensor : checkpoint.tensors()) names.push_back(tensor->name);
  return names;
}

// Two shards: a.safetensors holds "embed" and "norm", b.safetensors holds "lm_head".
void WriteShardedFolder(const TempFolder& folder, const std::string& weight_map) {
  WriteF32File(folder.File("a.safetensors"), {{"norm", {4}}, {"embed", {2, 4}}});
  WriteF32File(folder.File("b.safetensors"), {{"lm_head", {8}}, {"not_in_index", {1}}});
  WriteBytes(folder.File("model.safetensors.index.json"),
             "{\"metadata\": {\"total_size\": 80}, \"weight_map\": {" + weight_map + "}}");
}

const char kGoodWeightMap[] =
    "\"embed\": \"a.safetensors\", \"norm\": \"a.safetensors\", \"lm_head\": \"b.safetensors\"";

TEST(CheckpointTest, OpensModelSafetensors) {
  TempFolder folder;
  WriteF32File(folder.File("model.safetensors"), {{"b", {2, 3}}, {"a", {8}}, {"c", {}}});
  WriteF32File(folder.File("other.safetensors"), {{"x", {1}}});  // ignored: model.* wins
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(folder.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->path(), folder.path());
  EXPECT_EQ(Names(*checkpoint), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(checkpoint->num_parameters(), 6 + 8 + 1);
  EXPECT_EQ(checkpoint->total_bytes(), 4 * (6 + 8 + 1));
  const TensorInfo* b = checkpoint->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(static_cast<const float*>(b->data)[5], 5.0f);
  EXPECT_EQ(b->file, folder.File("model.safetensors"));
  EXPECT_EQ(checkpoint->Find("x"), nullptr);
}

TEST(CheckpointTest, OpensTheOnlySafetensorsFile) {
  TempFolder folder;
  WriteF32File(folder.File("weights.safetensors"), {{"w", {2}}});
  WriteBytes(folder.File("config.json"), "{}");
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(folder.path() + "/");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(Names(*checkpoint), (std::vector<std::string>{"w"}));
  EXPECT_EQ(checkpoint->Find("w")->file, folder.File("weights.safetensors"));
}

TEST(CheckpointTest, OpensAFileGivenDirectly) {
  TempFolder folder;
  WriteF32File(folder.File("w.safetensors"), {{"w", {2}}});
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(folder.File("w.safetensors"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(Names(*checkpoint), (std::vector<std::string>{"w"}));
}

TEST(CheckpointTest, SeveralSafetensorsFilesWithoutIndexAreAmbiguous) {
  TempFolder folder;
  WriteF32File(folder.File("one.safetensors"), {{"w", {2}}});
  WriteF32File(folder.File("two.safetensors"), {{"w", {2}}});
  const absl::Status status = Checkpoint::Open(folder.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(Message(status), folder.path());
  LOOM_EXPECT_CONTAINS(Message(status), "one.safetensors, two.safetensors");
}

TEST(CheckpointTest, EmptyFolderIsNotFound) {
  TempFolder folder;
  const absl::Status status = Checkpoint::Open(folder.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(Message(status), folder.path());
  LOOM_EXPECT_CONTAINS(Message(status), "model.safetensors");
}

TEST(CheckpointTest, MissingFolderIsNotFound) {
  TempFolder folder;
  const std::string path = folder.File("no_such_model");
  const absl::Status status = Checkpoint::Open(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(Message(status), path);
}

TEST(CheckpointTest, OpensShardedIndex) {
  TempFolder folder;
  WriteShardedFolder(folder, kGoodWeightMap);
  absl::StatusOr<Checkpoint> opened = Checkpoint::Open(folder.path());
  ASSERT_TRUE(opened.ok()) << opened.status();
  const Checkpoint checkpoint = *std::move(opened);  // pointers survive the move
  EXPECT_EQ(Names(checkpoint), (std::vector<std::string>{"embed", "lm_head", "norm"}));
  EXPECT_EQ(checkpoint.files().size(), 2u);
  EXPECT_EQ(checkpoint.num_parameters(), 8 + 8 + 4);
  EXPECT_EQ(checkpoint.total_bytes(), 80);
  EXPECT_EQ(checkpoint.Find("lm_head")->file, folder.File("b.safetensors"));
  EXPECT_EQ(checkpoint.Find("embed")->file, folder.File("a.safetensors"));
  EXPECT_EQ(static_cast<const float*>(checkpoint.Find("lm_head")->data)[7], 7.0f);
  EXPECT_EQ(checkpoint.Find("not_in_index"), nullptr);  // only what the index lists
  EXPECT_FALSE(checkpoint.in_anonymous_memory());
}

// Every shard copied into anonymous memory: the same tensors, read from the copies.
TEST(CheckpointTest, OpensShardedIndexIntoAnonymousMemory) {
  TempFolder folder;
  WriteShardedFolder(folder, kGoodWeightMap);
  absl::StatusOr<Checkpoint> checkpoint =
      Checkpoint::Open(folder.path(), {.memory = WeightMemory::kAnonymous});
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE(checkpoint->in_anonymous_memory());
  ASSERT_EQ(checkpoint->files().size(), 2u);
  for (const auto& file : checkpoint->files()) EXPECT_TRUE(file->in_anonymous_memory());
  EXPECT_EQ(Names(*checkpoint), (std::vector<std::string>{"embed", "lm_head", "norm"}));
  EXPECT_EQ(static_cast<const float*>(checkpoint->Find("lm_head")->data)[7], 7.0f);
}

TEST(CheckpointTest, IndexNamingAMissingShardIsNotFound) {
  TempFolder folder;
  WriteShardedFolder(folder, std::string(kGoodWeightMap) + ", \"extra\": \"c.safetensors\"");
  const absl::Status status = Checkpoint::Open(folder.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(Message(status), folder.File("c.safetensors"));
  LOOM_EXPECT_CONTAINS(Message(status), "'extra'");
  LOOM_EXPECT_CONTAINS(Message(status), "model.safetensors.index.json");
}

TEST(CheckpointTest, IndexTensorMissingFromItsShardIsAnError) {
  TempFolder folder;
  WriteShardedFolder(folder, std::string(kGoodWeightMap) + ", \"ghost\": \"b.safetensors\"");
  const absl::Status status = Checkpoint::Open(folder.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(Message(status), folder.File("b.safetensors"));
  LOOM_EXPECT_CONTAINS(Message(status), "'ghost'");
}

TEST(CheckpointTest, IndexTensorInTheWrongShardIsAnError) {
  TempFolder folder;
  WriteShardedFolder(folder, "\"embed\": \"b.safetensors\", \"lm_head\": \"b.safetensors\"");
  const absl::Status status = Checkpoint::Open(folder.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(Message(status), "'embed'");
}

TEST(CheckpointTest, ShardNamesLeavingTheFolderAreRefused) {
  for (const std::string shard :
       {"../a.safetensors", "sub/a.safetensors", "..", "/etc/passwd", "a\\\\b.safetensors", ""}) {
    SCOPED_TRACE(shard);
    TempFolder folder;
    WriteShardedFolder(folder, "\"embed\": \"a.safetensors\", \"evil\": \"" + shard + "\"");
    const absl::Status status = Checkpoint::Open(folder.path()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    LOOM_EXPECT_CONTAINS(Message(status), "'evil'");
    LOOM_EXPECT_CONTAINS(Message(status), "model.safetensors.index.json");
  }
}

TEST(CheckpointTest, MalformedIndexIsRefused) {
  for (const std::string index : {"{not json", "[]", "{\"metadata\": {}}", "{\"weight_map\": []}",
                                  "{\"weight_map\": {}}", "{\"weight_map\": {\"embed\": 3}}"}) {
    SCOPED_TRACE(index);
    TempFolder folder;
    WriteF32File(folder.File("model.safetensors"), {{"embed", {2}}});
    WriteBytes(folder.File("model.safetensors.index.json"), index);
    const absl::Status status = Checkpoint::Open(folder.path()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    LOOM_EXPECT_CONTAINS(Message(status), folder.File("model.safetensors.index.json"));
  }
}

TEST(CheckpointTest, CorruptShardNamesTheShardAndTensor) {
  TempFolder folder;
  WriteShardedFolder(folder, kGoodWeightMap);
  // Corrupt the size of "lm_head" in b.safetensors by rewriting its header in place.
  std::string bytes = testing_util::ReadBytes(folder.File("b.safetensors"));
  const size_t at = bytes.find("\"shape\":[8]");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 11, "\"shape\":[9]");
  WriteBytes(folder.File("b.safetensors"), bytes);
  const absl::Status status = Checkpoint::Open(folder.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(Message(status), folder.File("b.safetensors"));
  LOOM_EXPECT_CONTAINS(Message(status), "'lm_head'");
}

}  // namespace
}  // namespace loom
