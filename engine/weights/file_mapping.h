// The read-only bytes of a whole weight file, as SafetensorsFile and GgufFile hold them: the
// file's own mapping (pages of the page cache, shared with every process that maps the file), or
// a private copy in anonymous memory that the kernel may back with transparent huge pages.
//
// Why a copy: the CPU backend reads every weight byte once per decode step, and a read that
// streams through 4 KiB page-cache pages is slower than one through 2 MiB pages. Measured on an
// Intel Xeon with AMX (2 vCPUs, one thread reading 1 GiB with four AVX-512 streams, three
// alternated pairs): 15.4-16.2 GB/s from the file mapping, 16.3-17.4 GB/s from anonymous memory
// with huge pages (bench/results/peers/intel-amx-analysis.md). The copy costs one read of the
// file at load and a resident size of the whole file per process (the page cache's pages of the
// file are dropped after the copy, unless another process maps them).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"

namespace loom {

// Where a weight file's bytes live while the engine reads them.
enum class WeightMemory {
  kFile,       // the file's mapping, read in place
  kAnonymous,  // copied at open into anonymous memory (huge pages where the kernel allows)
  kAuto,       // kAnonymous while the file is at most half of MemAvailable, else kFile
};

// "file", "anonymous", "auto", and back (nullopt for any other name).
std::string_view WeightMemoryName(WeightMemory memory);
std::optional<WeightMemory> WeightMemoryFromName(std::string_view name);

// How the file's pages are read in (kFile only; a copy reads the file front to back once).
enum class MapAdvice {
  kNormal,      // no hint
  kSequential,  // one front-to-back pass (copying to a device): bigger read-ahead
  kWillNeed,    // start reading the whole file in now, in the background
};

struct MapOptions {
  // Fault every page in during Open (MAP_POPULATE): Open takes longer, the first pass does not.
  bool populate = false;
  MapAdvice advice = MapAdvice::kNormal;
  WeightMemory memory = WeightMemory::kFile;
};

// `bytes` read-only bytes at `data`; `anonymous` when they are a private copy. Unmap with
// UnmapFileBytes.
struct FileBytes {
  const void* data = nullptr;
  size_t bytes = 0;
  bool anonymous = false;
};

// The first `size` bytes of the open file `fd` (size > 0), held as `options` asks. `path` is for
// messages. Errors: the errno of a failed mmap or read, DataLoss when the file is shorter than
// `size` (it changed after the caller's fstat).
absl::StatusOr<FileBytes> MapFileBytes(int fd, size_t size, std::string_view path,
                                       const MapOptions& options);

void UnmapFileBytes(const FileBytes& file);

}  // namespace loom
