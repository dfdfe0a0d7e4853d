#include "engine/weights/file_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kReadChunkBytes = size_t{64} << 20;

// MemAvailable from /proc/meminfo in bytes, or 0 when it cannot be read.
size_t MemAvailableBytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return static_cast<size_t>(kib) * 1024;
}

bool WantsCopy(size_t size, WeightMemory memory) {
  if (memory == WeightMemory::kAnonymous) return true;
  if (memory == WeightMemory::kFile) return false;
  return size <= MemAvailableBytes() / 2;
}

size_t PageBytes() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : 4096;
}

// Anonymous memory of `size` bytes (rounded up to pages) starting on a huge-page boundary, so
// that the kernel can back it with huge pages from its first byte.
void* MapAlignedAnonymous(size_t size) {
  const size_t page = PageBytes();
  const size_t length = (size + page - 1) / page * page;
  void* raw = mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  if (aligned > begin) munmap(raw, aligned - begin);
  const uintptr_t end = begin + length + kHugePageBytes;
  if (end > aligned + length) {
    munmap(reinterpret_cast<void*>(aligned + length), end - aligned - length);
  }
  void* out = reinterpret_cast<void*>(aligned);
  // Only a hint (with transparent huge pages "always" it changes nothing, with "never" nothing
  // helps).
  madvise(out, length, MADV_HUGEPAGE);
  return out;
}

// Reads the first `size` bytes of `fd` into `out`.
absl::Status ReadAll(int fd, size_t size, std::string_view path, uint8_t* out) {
  size_t done = 0;
  while (done < size) {
    const size_t want = size - done < kReadChunkBytes ? size - done : kReadChunkBytes;
    const ssize_t got = pread(fd, out + done, want, static_cast<off_t>(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, StrCat(path, ": cannot read"));
    }
    if (got == 0) {
      return absl::DataLossError(StrCat(path, ": file ended at byte ", done, " of ", size,
                                        " while being read (did it change?)"));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view WeightMemoryName(WeightMemory memory) {
  switch (memory) {
    case WeightMemory::kFile:
      return "file";
    case WeightMemory::kAnonymous:
      return "anonymous";
    case WeightMemory::kAuto:
      return "auto";
  }
  return "file";
}

std::optional<WeightMemory> WeightMemoryFromName(std::string_view name) {
  for (WeightMemory m : {WeightMemory::kFile, WeightMemory::kAnonymous, WeightMemory::kAuto}) {
    if (WeightMemoryName(m) == name) return m;
  }
  return std::nullopt;
}

absl::StatusOr<FileBytes> MapFileBytes(int fd, size_t size, std::string_view path,
                                       const MapOptions& options) {
  FileBytes out;
  out.bytes = size;
  if (WantsCopy(size, options.memory)) {
    void* copy = MapAlignedAnonymous(size);
    if (copy == nullptr) {
      return absl::ErrnoToStatus(errno, StrCat(path, ": cannot allocate ", size,
                                               " bytes for a copy of the file"));
    }
    const absl::Status read = ReadAll(fd, size, path, static_cast<uint8_t*>(copy));
    if (!read.ok()) {
      munmap(copy, size);
      return read;
    }
    mprotect(copy, size, PROT_READ);
    // The copy is what is read from now on: the page cache need not keep the file as well
    // (pages another process maps stay).
    posix_fadvise(fd, 0, static_cast<off_t>(size), POSIX_FADV_DONTNEED);
    out.data = copy;
    out.anonymous = true;
    return out;
  }
  void* mapping =
      mmap(nullptr, size, PROT_READ, MAP_PRIVATE | (options.populate ? MAP_POPULATE : 0), fd, 0);
  if (mapping == MAP_FAILED) return absl::ErrnoToStatus(errno, StrCat(path, ": cannot mmap"));
  int advice = MADV_NORMAL;
  if (options.advice == MapAdvice::kSequential) advice = MADV_SEQUENTIAL;
  if (options.advice == MapAdvice::kWillNeed) advice = MADV_WILLNEED;
  // Only a hint: a failure changes nothing the caller can observe.
  if (advice != MADV_NORMAL) madvise(mapping, size, advice);
  out.data = mapping;
  return out;
}

void UnmapFileBytes(const FileBytes& file) {
  if (file.data != nullptr) munmap(const_cast<void*>(file.data), file.bytes);
}

}  // namespace loom
