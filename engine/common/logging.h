// Minimal logging and invariant checks.
//
// LOOM_LOG(kInfo, "loaded ", n, " tensors") writes one line to stderr with a timestamp and level.
// LOOM_CHECK(cond, "message parts...") aborts with file:line and the message when an invariant
// that cannot fail after start-up does fail (STYLE.md: crash on what should never happen; input
// from clients and files is validated and returned as a Status instead).
// Thread-safe: each line is written with one call.
#pragma once

#include <string_view>

#include "engine/common/strings.h"

namespace loom {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Default kInfo; LOOM_LOG_LEVEL=debug|info|warning|error.
LogLevel MinLogLevel();

void LogLine(LogLevel level, std::string_view message);

namespace internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              std::string_view message);
}  // namespace internal

}  // namespace loom

#define LOOM_LOG(level, ...)                                              \
  do {                                                                    \
    if (::loom::LogLevel::level >= ::loom::MinLogLevel())                 \
      ::loom::LogLine(::loom::LogLevel::level, ::loom::StrCat(__VA_ARGS__)); \
  } while (false)

#define LOOM_CHECK(condition, ...)                                              \
  do {                                                                          \
    if (__builtin_expect(!(condition), 0))                                      \
      ::loom::internal::CheckFailed(__FILE__, __LINE__, #condition,             \
                                    ::loom::StrCat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (false)
