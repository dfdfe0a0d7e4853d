// engine/common/file.h: ReadFile's contents and its errors (missing, a folder, a FIFO, too large,
// a path through a file), FileExists and BaseName.
#include "engine/common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

using testing_util::TempFolder;
using testing_util::WriteBytes;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(ReadFileTest, ReadsBytesExactly) {
  TempFolder folder;
  std::string bytes;
  for (int i = 0; i < 100'000; ++i) bytes.push_back(static_cast<char>(i * 7));
  WriteBytes(folder.File("data.bin"), bytes);
  absl::StatusOr<std::string> read = ReadFile(folder.File("data.bin"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
}

TEST(ReadFileTest, EmptyFile) {
  TempFolder folder;
  WriteBytes(folder.File("empty"), "");
  absl::StatusOr<std::string> read = ReadFile(folder.File("empty"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "");
}

TEST(ReadFileTest, MissingFileIsNotFoundNamingThePath) {
  TempFolder folder;
  absl::StatusOr<std::string> read = ReadFile(folder.File("nope.json"));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(Message(read.status()), folder.File("nope.json"));
}

// "file/child": the parent is not a folder. Nothing there, so NotFound like a missing file.
TEST(ReadFileTest, PathThroughAFileIsNotFound) {
  TempFolder folder;
  WriteBytes(folder.File("file"), "x");
  absl::StatusOr<std::string> read = ReadFile(folder.File("file/child"));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << read.status();
  LOOM_EXPECT_CONTAINS(Message(read.status()), folder.File("file/child"));
}

TEST(ReadFileTest, OtherOpenErrorsKeepTheirErrno) {
  TempFolder folder;
  const std::string long_name = folder.File(std::string(5000, 'a'));
  absl::StatusOr<std::string> read = ReadFile(long_name);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().code(), absl::StatusCode::kPermissionDenied) << read.status();
  LOOM_EXPECT_CONTAINS(Message(read.status()), "name too long");
}

TEST(ReadFileTest, FolderIsNotARegularFile) {
  TempFolder folder;
  absl::StatusOr<std::string> read = ReadFile(folder.path());
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(read.status()), folder.path() + ": not a regular file");
}

// Opening a FIFO for reading blocks until a writer comes; ReadFile must refuse it at once. (A
// helper thread opens the writing end after a while, so a ReadFile that blocks fails this test
// by its duration instead of hanging it.)
TEST(ReadFileTest, FifoIsRefusedWithoutBlocking) {
  TempFolder folder;
  const std::string fifo = folder.File("config.json");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::atomic<bool> done{false};
  std::thread unblocker([&] {
    for (int i = 0; i < 300 && !done.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (done.load()) return;
    const int fd = open(fifo.c_str(), O_WRONLY);
    if (fd >= 0) close(fd);
  });
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> read = ReadFile(fifo);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  done.store(true);
  unblocker.join();
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(read.status()), fifo + ": not a regular file");
  EXPECT_LT(elapsed, std::chrono::seconds(2));
}

TEST(ReadFileTest, RefusesFilesOverTheLimit) {
  TempFolder folder;
  WriteBytes(folder.File("big"), std::string(1001, 'x'));
  absl::StatusOr<std::string> read = ReadFile(folder.File("big"), 1000);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(read.status()),
            folder.File("big") + ": 1001 bytes is larger than the limit of 1000");
  EXPECT_TRUE(ReadFile(folder.File("big"), 1001).ok());
}

TEST(FileExistsTest, FilesAndFolders) {
  TempFolder folder;
  WriteBytes(folder.File("f"), "1");
  EXPECT_TRUE(FileExists(folder.File("f")));
  EXPECT_TRUE(FileExists(folder.path()));
  EXPECT_FALSE(FileExists(folder.File("g")));
  EXPECT_FALSE(FileExists(""));
}

TEST(BaseNameTest, LastComponent) {
  EXPECT_EQ(BaseName("a/b/c"), "c");
  EXPECT_EQ(BaseName("/models/llama"), "llama");
  EXPECT_EQ(BaseName("/models/llama/"), "llama");
  EXPECT_EQ(BaseName("/models/llama///"), "llama");
  EXPECT_EQ(BaseName("llama"), "llama");
  EXPECT_EQ(BaseName(""), "");
  EXPECT_EQ(BaseName("/"), "/");
  EXPECT_EQ(BaseName("///"), "/");
  EXPECT_EQ(BaseName("/x"), "x");
}

}  // namespace
}  // namespace loom
