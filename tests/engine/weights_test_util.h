// Helpers shared by the weights tests (safetensors, checkpoint, weight spec): a fresh folder per
// test and raw file writing, so tests can build exactly the bytes a malformed file has.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

// EXPECT that string `text` contains (or does not contain) `part`, printing both when not.
// (GoogleTest's own predicates; the test targets do not link gMock's matchers.)
#define LOOM_EXPECT_CONTAINS(text, part) EXPECT_PRED_FORMAT2(::testing::IsSubstring, part, text)
#define LOOM_EXPECT_NOT_CONTAINS(text, part) \
  EXPECT_PRED_FORMAT2(::testing::IsNotSubstring, part, text)

namespace loom::testing_util {

// A folder under testing::TempDir() named after the running test, empty at construction and
// removed at destruction.
class TempFolder {
 public:
  TempFolder() {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("loom_weights_") + test->test_suite_name() + "_" + test->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = (std::filesystem::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid())))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;

  const std::string& path() const { return path_; }
  // Path of `name` inside the folder.
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The bytes of a safetensors file: the 8-byte little-endian `header_length` (by default the
// header's real length), `header` and `data`, with no padding added.
inline std::string RawSafetensors(std::string_view header, std::string_view data,
                                  std::optional<uint64_t> header_length = std::nullopt) {
  const uint64_t length = header_length.value_or(header.size());
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  bytes.append(header);
  bytes.append(data);
  return bytes;
}

}  // namespace loom::testing_util
