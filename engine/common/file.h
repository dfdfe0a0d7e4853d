// Small file helpers that report failures as absl::Status naming the path.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace loom {

// The whole file as bytes. NotFound when it does not exist; InvalidArgument for anything but a
// regular file (a FIFO is refused without waiting for a writer) and for files over `max_bytes`.
absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes = int64_t{1} << 30);

bool FileExists(const std::string& path);

// "a/b/c" -> "c"; trailing slashes ignored; "/" -> "/".
std::string_view BaseName(std::string_view path);

}  // namespace loom
