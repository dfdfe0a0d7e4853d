// WriteSafetensors and WriteShardedCheckpoint: layout (padding, order), streaming producers,
// atomic replacement, JSON escaping, and the errors callers can cause.
#include "engine/weights/safetensors_writer.h"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/weights/checkpoint.h"
#include "engine/weights/safetensors.h"
#include "gtest/gtest.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

using testing_util::ReadBytes;
using testing_util::TempFolder;
using testing_util::WriteBytes;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

uint64_t HeaderLength(const std::string& bytes) {
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  return length;
}

TEST(SafetensorsWriterTest, PadsTheHeaderWithSpacesAndKeepsTheGivenOrder) {
  TempFolder folder;
  const std::string path = folder.File("layout.safetensors");
  const uint8_t a[3] = {1, 2, 3};
  const uint8_t b[1] = {9};
  const TensorToWrite tensors[] = {{.name = "z", .dtype = DType::kU8, .shape = {3}, .data = a},
                                   {.name = "a", .dtype = DType::kU8, .shape = {1}, .data = b}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  const std::string bytes = ReadBytes(path);
  const uint64_t length = HeaderLength(bytes);
  EXPECT_EQ(length % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + length + 4);
  const std::string header = bytes.substr(8, length);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"},\"z\":", 0), 0u) << header;
  EXPECT_EQ(header.substr(header.find_last_not_of(' ') + 1),
            std::string(length - 1 - header.find_last_not_of(' '), ' '));
  EXPECT_EQ(bytes.substr(8 + length), std::string("\x01\x02\x03\x09", 4));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(SafetensorsWriterTest, StreamsProducedBytesInChunks) {
  TempFolder folder;
  const std::string path = folder.File("streamed.safetensors");
  constexpr int64_t kCount = 3 << 20;  // 12 MiB of f32: larger than the write buffer
  const TensorToWrite tensors[] = {{.name = "big",
                                    .dtype = DType::kF32,
                                    .shape = {kCount},
                                    .produce = [](const ByteSink& sink) -> absl::Status {
                                      std::vector<float> chunk(1000);
                                      for (int64_t begin = 0; begin < kCount; begin += 1000) {
                                        const int64_t n = std::min<int64_t>(1000, kCount - begin);
                                        for (int64_t i = 0; i < n; ++i)
                                          chunk[i] = static_cast<float>(begin + i);
                                        absl::Status status = sink(chunk.data(), n * sizeof(float));
                                        if (!status.ok()) return status;
                                      }
                                      return absl::OkStatus();
                                    }}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const auto* values = static_cast<const float*>((*file)->Find("big")->data);
  for (int64_t i : {int64_t{0}, int64_t{999}, int64_t{1000}, kCount / 2, kCount - 1}) {
    EXPECT_EQ(values[i], static_cast<float>(i));
  }
}

TEST(SafetensorsWriterTest, ProducerWritingTheWrongSizeFailsAndLeavesNoFile) {
  TempFolder folder;
  const std::string path = folder.File("short.safetensors");
  for (const size_t produced : {size_t{4}, size_t{12}}) {
    const TensorToWrite tensors[] = {{.name = "w",
                                      .dtype = DType::kF32,
                                      .shape = {2},
                                      .produce = [produced](const ByteSink& sink) {
                                        const std::vector<char> bytes(produced, 0);
                                        return sink(bytes.data(), bytes.size());
                                      }}};
    const absl::Status status = WriteSafetensors(path, tensors);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    LOOM_EXPECT_CONTAINS(Message(status), path);
    LOOM_EXPECT_CONTAINS(Message(status), "'w'");
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  }
}

TEST(SafetensorsWriterTest, FailureLeavesTheOldFileInPlace) {
  TempFolder folder;
  const std::string path = folder.File("keep.safetensors");
  WriteBytes(path, "old contents");
  const TensorToWrite tensors[] = {
      {.name = "w", .dtype = DType::kF32, .shape = {2}, .produce = [](const ByteSink&) {
         return absl::AbortedError("generator gave up");
       }}};
  const absl::Status status = WriteSafetensors(path, tensors);
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ReadBytes(path), "old contents");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(SafetensorsWriterTest, UnwritableFolderIsAnError) {
  TempFolder folder;
  const std::string path = folder.File("no/such/folder/w.safetensors");
  const absl::Status status = WriteSafetensors(path, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(Message(status), path);
}

TEST(SafetensorsWriterTest, RefusesBadNamesAndShapes) {
  TempFolder folder;
  const std::string path = folder.File("bad.safetensors");
  const float x[2] = {};
  const std::vector<std::vector<TensorToWrite>> cases = {
      {{.name = "w", .shape = {2}, .data = x}, {.name = "w", .shape = {2}, .data = x}},
      {{.name = "__metadata__", .shape = {2}, .data = x}},
      {{.name = "", .shape = {2}, .data = x}},
      {{.name = "bad\xff", .shape = {2}, .data = x}},
      {{.name = "w", .shape = {-2}, .data = x}},
      {{.name = "w", .shape = {int64_t{1} << 40, int64_t{1} << 40}, .data = x}},
      {{.name = "w", .shape = {2}}},
  };
  for (const std::vector<TensorToWrite>& tensors : cases) {
    SCOPED_TRACE(tensors.back().name);
    const absl::Status status = WriteSafetensors(path, tensors);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    LOOM_EXPECT_CONTAINS(Message(status), path);
    EXPECT_FALSE(std::filesystem::exists(path));
  }
  EXPECT_EQ(WriteSafetensors(path, {}, {{"k", "bad\xc0\x80"}}).code(),
            absl::StatusCode::kInvalidArgument);  // overlong UTF-8
}

TEST(SafetensorsWriterTest, EscapesNamesAndMetadata) {
  TempFolder folder;
  const std::string path = folder.File("escaped.safetensors");
  const std::string name = "quote\" back\\slash\nnew\ttab \x01 caf\xc3\xa9 \xf0\x9f\x98\x80";
  const int32_t value = 5;
  const TensorToWrite tensors[] = {
      {.name = name, .dtype = DType::kI32, .shape = {1}, .data = &value}};
  const std::map<std::string, std::string> metadata = {{"k\"\\", "v\n\x1f\xc3\xa9"}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_NE((*file)->Find(name), nullptr);
  EXPECT_EQ(*static_cast<const int32_t*>((*file)->Find(name)->data), 5);
  EXPECT_EQ((*file)->metadata(), metadata);
}

TEST(SafetensorsWriterTest, ShardedCheckpointSplitsInOrderAndOpens) {
  TempFolder folder;
  const std::string dir = folder.File("model");
  std::vector<std::vector<uint16_t>> contents;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 5; ++i) {
    contents.emplace_back(64 * (i + 1), static_cast<uint16_t>(i));
    tensors.push_back({.name = "layers." + std::to_string(i) + ".weight",
                       .dtype = DType::kBF16,
                       .shape = {8, 8 * (i + 1)},
                       .data = contents.back().data()});
  }
  // Sizes 128, 256, 384, 512, 640 bytes; at most 600 per shard: [0, 1], [2], [3], [4].
  ASSERT_TRUE(WriteShardedCheckpoint(dir, tensors, 600, {{"format", "pt"}}).ok());
  for (int s = 1; s <= 4; ++s) {
    EXPECT_TRUE(
        std::filesystem::exists(dir + "/model-0000" + std::to_string(s) + "-of-00004.safetensors"));
  }
  const std::string index = ReadBytes(dir + "/model.safetensors.index.json");
  LOOM_EXPECT_CONTAINS(index, "\"total_size\": 1920");
  LOOM_EXPECT_CONTAINS(index, "\"layers.1.weight\": \"model-00001-of-00004.safetensors\"");
  LOOM_EXPECT_CONTAINS(index, "\"layers.4.weight\": \"model-00004-of-00004.safetensors\"");

  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->files().size(), 4u);
  EXPECT_EQ(checkpoint->total_bytes(), 1920);
  EXPECT_EQ(checkpoint->files()[0]->metadata().at("format"), "pt");
  const TensorInfo* last = checkpoint->Find("layers.4.weight");
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(static_cast<const uint16_t*>(last->data)[319], 4);
}

TEST(SafetensorsWriterTest, ShardedCheckpointThatFitsIsOneFile) {
  TempFolder folder;
  const std::string dir = folder.File("small");
  const float x[4] = {1, 2, 3, 4};
  const TensorToWrite tensors[] = {{.name = "w", .shape = {4}, .data = x}};
  ASSERT_TRUE(WriteShardedCheckpoint(dir, tensors, 1 << 20).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  EXPECT_EQ(WriteShardedCheckpoint(dir, tensors, 0).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom
