// String concatenation for messages: loom::StrCat(args...) appends each argument's text.
//
// Abseil's own StrCat is not used directly because the Debian build of Abseil has its own
// string_view type that std::string_view does not convert to; this one takes std::string_view,
// std::string, C strings, characters, integers, floating-point numbers (%g-style text with six
// significant digits, as absl::StrCat) and strong ids (anything with a `value()` returning an
// integer).
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace loom {

// A std::string_view as Abseil's string_view (for Abseil APIs on Debian's build, see above).
inline absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

namespace strings_internal {

inline void Append(std::string& out, std::string_view piece) { out.append(piece); }
inline void Append(std::string& out, const char* piece) { out.append(piece ? piece : "(null)"); }
inline void Append(std::string& out, const std::string& piece) { out.append(piece); }
// Abseil's own string_view (absl::Status::message() returns one).
inline void Append(std::string& out, absl::string_view piece) { out.append(piece.data(), piece.size()); }
inline void Append(std::string& out, char c) { out.push_back(c); }
inline void Append(std::string& out, bool b) { out.append(b ? "true" : "false"); }

template <typename T>
  requires(std::integral<T> && !std::same_as<T, char> && !std::same_as<T, bool>)
void Append(std::string& out, T value) {
  out.append(std::to_string(value));
}

template <typename T>
  requires std::floating_point<T>
void Append(std::string& out, T value) {
  const absl::AlphaNum text(static_cast<double>(value));
  out.append(text.data(), text.size());
}

template <typename T>
  requires requires(const T& id) {
    { id.value() } -> std::integral;
  }
void Append(std::string& out, const T& id) {
  out.append(std::to_string(id.value()));
}

}  // namespace strings_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (strings_internal::Append(out, args), ...);
  return out;
}

}  // namespace loom
