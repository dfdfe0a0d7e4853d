// SafetensorsFile: round trips through WriteSafetensors, in-place data, and one case per way a
// file can be malformed, each checking the status code and that the message names the file and
// the tensor at fault.
#include "engine/weights/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/common/strings.h"
#include "engine/weights/safetensors_writer.h"
#include "gtest/gtest.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

using testing_util::RawSafetensors;
using testing_util::TempFolder;
using testing_util::WriteBytes;

constexpr DType kAllDTypes[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kI64,
                                DType::kI32, DType::kI16, DType::kI8,  DType::kU8,   DType::kBool};

// Deterministic bytes for tensor number `seed`; 0/1 for bool, which allows nothing else.
std::vector<unsigned char> PatternBytes(size_t num_bytes, int seed, DType dtype) {
  std::vector<unsigned char> bytes(num_bytes);
  for (size_t i = 0; i < num_bytes; ++i) {
    bytes[i] = static_cast<unsigned char>(i * 31 + seed * 17 + 5);
    if (dtype == DType::kBool) bytes[i] &= 1;
  }
  return bytes;
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(SafetensorsTest, RoundTripsEveryDType) {
  TempFolder folder;
  const std::string path = folder.File("all.safetensors");
  std::vector<std::vector<unsigned char>> contents;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < static_cast<int>(std::size(kAllDTypes)); ++i) {
    const DType dtype = kAllDTypes[i];
    contents.push_back(PatternBytes(3 * 5 * DTypeSize(dtype), i, dtype));
    tensors.push_back({.name = StrCat("t.", SafetensorsDTypeName(dtype)),
                       .dtype = dtype,
                       .shape = {3, 5},
                       .data = contents.back().data()});
  }
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}, {"note", "x"}}).ok());

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->path(), path);
  EXPECT_EQ((*file)->metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x"}}));
  ASSERT_EQ((*file)->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& got = (*file)->tensors()[i];  // file order is the order written
    SCOPED_TRACE(got.name);
    EXPECT_EQ(got.name, tensors[i].name);
    EXPECT_EQ(got.dtype, tensors[i].dtype);
    EXPECT_EQ(got.shape, (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(got.NumElements(), 15);
    EXPECT_EQ(got.file, path);
    ASSERT_EQ(got.num_bytes, static_cast<int64_t>(contents[i].size()));
    EXPECT_EQ(std::memcmp(got.data, contents[i].data(), contents[i].size()), 0);
    EXPECT_EQ((*file)->Find(tensors[i].name), &got);
  }
  EXPECT_EQ((*file)->Find("t.nope"), nullptr);
}

TEST(SafetensorsTest, DataIsUsedInPlaceFromTheMapping) {
  TempFolder folder;
  const std::string path = folder.File("in_place.safetensors");
  const std::vector<float> a = {1, 2, 3, 4};
  const std::vector<float> b = {5, 6};
  const TensorToWrite tensors[] = {
      {.name = "a", .dtype = DType::kF32, .shape = {2, 2}, .data = a.data()},
      {.name = "b", .dtype = DType::kF32, .shape = {2}, .data = b.data()}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorInfo* ta = (*file)->Find("a");
  const TensorInfo* tb = (*file)->Find("b");
  ASSERT_NE(ta, nullptr);
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(static_cast<const char*>(ta->data) + ta->num_bytes, tb->data);  // contiguous
  EXPECT_EQ((*file)->data_offset() % 8, 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ta->data) % 8, 0u);

  // Overwrite b[1] in the file: the unwritten private mapping shares the page cache on Linux,
  // so the tensor sees the new value, which no copy taken at Open would.
  const float replaced = 42.0f;
  const int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, &replaced, sizeof(replaced), (*file)->data_offset() + 16 + 4),
            static_cast<ssize_t>(sizeof(replaced)));
  close(fd);
  EXPECT_EQ(static_cast<const float*>(tb->data)[1], 42.0f);
}

TEST(SafetensorsTest, ScalarEmptyAndZeroSizedTensors) {
  TempFolder folder;
  const std::string path = folder.File("shapes.safetensors");
  const float scalar = 7.5f;
  const TensorToWrite tensors[] = {
      {.name = "empty", .dtype = DType::kBF16, .shape = {0, 4}},
      {.name = "scalar", .dtype = DType::kF32, .shape = {}, .data = &scalar},
      {.name = "also_empty", .dtype = DType::kI8, .shape = {3, 0}}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorInfo* s = (*file)->Find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->NumElements(), 1);
  EXPECT_EQ(*static_cast<const float*>(s->data), 7.5f);
  EXPECT_EQ((*file)->Find("empty")->num_bytes, 0);
  EXPECT_EQ((*file)->Find("empty")->NumElements(), 0);
  EXPECT_EQ((*file)->Find("also_empty")->num_bytes, 0);
}

TEST(SafetensorsTest, NoTensorsAtAll) {
  TempFolder folder;
  const std::string path = folder.File("empty.safetensors");
  WriteBytes(path, RawSafetensors("{}", ""));
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->tensors().empty());
  EXPECT_TRUE((*file)->metadata().empty());
}

TEST(SafetensorsTest, AcceptsEveryMapOption) {
  TempFolder folder;
  const std::string path = folder.File("options.safetensors");
  const std::vector<uint16_t> w(4096, 0x3f80);
  const TensorToWrite tensors[] = {
      {.name = "w", .dtype = DType::kBF16, .shape = {64, 64}, .data = w.data()}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  for (const MapAdvice advice :
       {MapAdvice::kNormal, MapAdvice::kSequential, MapAdvice::kWillNeed}) {
    for (const bool populate : {false, true}) {
      for (const WeightMemory memory :
           {WeightMemory::kFile, WeightMemory::kAnonymous, WeightMemory::kAuto}) {
        absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(
            path, {.populate = populate, .advice = advice, .memory = memory});
        ASSERT_TRUE(file.ok()) << file.status();
        EXPECT_EQ(Bf16ToF32(static_cast<const uint16_t*>((*file)->Find("w")->data)[4095]), 1.0f);
        if (memory != WeightMemory::kAuto) {
          EXPECT_EQ((*file)->in_anonymous_memory(), memory == WeightMemory::kAnonymous);
        }
      }
    }
  }
}

// WeightMemory::kAnonymous: the tensors point into a private copy that starts on a huge-page
// boundary, holds the file's bytes, and no longer sees the file (unlike the mapping above).
TEST(SafetensorsTest, AnonymousCopyHoldsTheFileAsItWasAtOpen) {
  TempFolder folder;
  const std::string path = folder.File("copied.safetensors");
  std::vector<float> a(3000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  const TensorToWrite tensors[] = {
      {.name = "a", .dtype = DType::kF32, .shape = {3000}, .data = a.data()}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(path, {.memory = WeightMemory::kAnonymous});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->in_anonymous_memory());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*file)->mapping()) % (uintptr_t{2} << 20), 0u);
  EXPECT_EQ((*file)->file_bytes(), static_cast<int64_t>(std::filesystem::file_size(path)));
  const TensorInfo* t = (*file)->Find("a");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->num_bytes, 12000);
  EXPECT_EQ(std::memcmp(t->data, a.data(), 12000), 0);

  const float replaced = 42.0f;
  const int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, &replaced, sizeof(replaced), (*file)->data_offset() + 4 * 2999),
            static_cast<ssize_t>(sizeof(replaced)));
  close(fd);
  EXPECT_EQ(static_cast<const float*>(t->data)[2999], 1499.5f);
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  TempFolder folder;
  const std::string path = folder.File("absent.safetensors");
  const absl::Status status = SafetensorsFile::Open(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(Message(status), path);
}

TEST(SafetensorsTest, FolderIsRefused) {
  TempFolder folder;
  const absl::Status status = SafetensorsFile::Open(folder.path()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(Message(status), folder.path());
}

TEST(SafetensorsTest, TruncatedFileIsDataLossNamingTheTensor) {
  TempFolder folder;
  const std::string path = folder.File("truncated.safetensors");
  const std::vector<float> a(16, 1.0f), b(16, 2.0f);
  const TensorToWrite tensors[] = {
      {.name = "first", .dtype = DType::kF32, .shape = {16}, .data = a.data()},
      {.name = "second", .dtype = DType::kF32, .shape = {4, 4}, .data = b.data()}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  for (const WeightMemory memory : {WeightMemory::kFile, WeightMemory::kAnonymous}) {
    const absl::Status status = SafetensorsFile::Open(path, {.memory = memory}).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    LOOM_EXPECT_CONTAINS(Message(status), path);
    LOOM_EXPECT_CONTAINS(Message(status), "'second'");
    LOOM_EXPECT_CONTAINS(Message(status), "truncated");
  }
}

TEST(SafetensorsTest, FileShorterThanTheLengthFieldIsDataLoss) {
  TempFolder folder;
  const std::string path = folder.File("tiny.safetensors");
  WriteBytes(path, std::string("\x02\x00\x00", 3));
  const absl::Status status = SafetensorsFile::Open(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  LOOM_EXPECT_CONTAINS(Message(status), path);
}

// Files whose only problem is their header. Each case checks the code and that the message
// names the file and the words in `expected` (the tensor at fault, where there is one).
struct MalformedCase {
  std::string label;
  std::string header;
  std::string data;
  std::optional<uint64_t> header_length;
  absl::StatusCode code;
  std::vector<std::string> expected;
};

class MalformedHeaderTest : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedHeaderTest, IsRefusedWithAMessageNamingFileAndTensor) {
  const MalformedCase& test = GetParam();
  TempFolder folder;
  const std::string path = folder.File(test.label + ".safetensors");
  WriteBytes(path, RawSafetensors(test.header, test.data, test.header_length));
  const absl::Status status = SafetensorsFile::Open(path).status();
  EXPECT_EQ(status.code(), test.code) << status;
  LOOM_EXPECT_CONTAINS(Message(status), path);
  for (const std::string& word : test.expected) LOOM_EXPECT_CONTAINS(Message(status), word);
}

// A valid entry for tensor `name`: `count` f32 values at [begin, begin + 4 * count).
std::string F32Entry(const std::string& name, int count, int begin) {
  return StrCat("\"", name, "\":{\"dtype\":\"F32\",\"shape\":[", count, "],\"data_offsets\":[",
                begin, ",", begin + 4 * count, "]}");
}

const std::string kEight(8, '\0');
constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

INSTANTIATE_TEST_SUITE_P(
    SafetensorsTest, MalformedHeaderTest,
    ::testing::Values(
        MalformedCase{"header_length_beyond_file",
                      "{}",
                      "",
                      1000,
                      absl::StatusCode::kDataLoss,
                      {"1000", "truncated"}},
        MalformedCase{"header_length_too_large", "{}", "", 200'000'000, kInvalid, {"200000000"}},
        MalformedCase{"header_length_too_small", "{}", "", 1, kInvalid, {"header length 1"}},
        MalformedCase{"header_not_json", "{not json", "", {}, kInvalid, {"invalid JSON"}},
        MalformedCase{"header_not_utf8", "{\"w\xff\":1}", "", {}, kInvalid, {"invalid JSON"}},
        MalformedCase{"header_not_object", "[1, 2]", "", {}, kInvalid, {"not a JSON object"}},
        MalformedCase{"entry_not_object", "{\"w\":5}", "", {}, kInvalid, {"'w'", "object"}},
        MalformedCase{"missing_dtype",
                      "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "dtype"}},
        MalformedCase{"dtype_not_string",
                      "{\"w\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "dtype"}},
        MalformedCase{"unknown_dtype",
                      "{\"w\":{\"dtype\":\"F17\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "unknown dtype 'F17'"}},
        MalformedCase{"unsupported_dtype",
                      "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[8],\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      absl::StatusCode::kUnimplemented,
                      {"'w'", "unsupported dtype F8_E4M3"}},
        MalformedCase{"negative_dim",
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1,2],\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "'shape'[0] is -1"}},
        MalformedCase{"fractional_dim",
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "'shape'[0] is 1.5"}},
        MalformedCase{"string_dim",
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "'shape'[0]"}},
        MalformedCase{"dim_beyond_int64",
                      "{\"w\":{\"dtype\":\"U8\",\"shape\":[18446744073709551615],"
                      "\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "'shape'[0]"}},
        MalformedCase{"shape_not_array",
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "'shape'"}},
        MalformedCase{"shape_product_overflows",
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                      "\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "overflows"}},
        MalformedCase{"offsets_not_a_pair",
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,16]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "data_offsets"}},
        MalformedCase{"offsets_reversed",
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "begin <= end"}},
        MalformedCase{"negative_offset",
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "data_offsets"}},
        MalformedCase{"size_not_shape_times_dtype",
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
                      kEight,
                      {},
                      kInvalid,
                      {"'w'", "needs 12 bytes", "hold 8"}},
        MalformedCase{"offsets_overlap",
                      StrCat("{", F32Entry("a", 2, 0), ",", F32Entry("b", 2, 4), "}"),
                      std::string(12, '\0'),
                      {},
                      kInvalid,
                      {"'b'", "overlap tensor 'a'"}},
        MalformedCase{"offsets_beyond_file",
                      StrCat("{", F32Entry("a", 2, 0), ",", F32Entry("b", 2, 8), "}"),
                      kEight,
                      {},
                      absl::StatusCode::kDataLoss,
                      {"'b'", "[8, 16)", "truncated"}},
        MalformedCase{"hole_between_tensors",
                      StrCat("{", F32Entry("a", 2, 0), ",", F32Entry("b", 2, 12), "}"),
                      std::string(20, '\0'),
                      {},
                      kInvalid,
                      {"'b'", "hole", "[8, 12)"}},
        MalformedCase{"hole_at_start",
                      StrCat("{", F32Entry("a", 2, 4), "}"),
                      std::string(12, '\0'),
                      {},
                      kInvalid,
                      {"'a'", "hole", "[0, 4)"}},
        MalformedCase{"trailing_bytes",
                      StrCat("{", F32Entry("a", 2, 0), "}"),
                      std::string(12, '\0'),
                      {},
                      kInvalid,
                      {"'a'", "[8, 12)", "belong to no tensor"}},
        MalformedCase{
            "metadata_not_object", "{\"__metadata__\":[1]}", "", {}, kInvalid, {"__metadata__"}},
        MalformedCase{"metadata_value_not_string",
                      "{\"__metadata__\":{\"k\":1}}",
                      "",
                      {},
                      kInvalid,
                      {"__metadata__", "'k'"}}),
    [](const ::testing::TestParamInfo<MalformedCase>& info) { return info.param.label; });

}  // namespace
}  // namespace loom
