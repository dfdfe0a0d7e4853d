// A small command-line parser for the `loom` tool: `--name value`, `--name=value` and boolean
// `--name` flags, each declared with a help line. Unknown flags and bad values are errors that
// name the flag.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace loom::cli {

class FlagSet {
 public:
  explicit FlagSet(std::string usage) : usage_(std::move(usage)) {}

  void String(std::string_view name, std::string* value, std::string_view help);
  // Repeatable: every occurrence is appended.
  void Strings(std::string_view name, std::vector<std::string>* values, std::string_view help);
  void Int(std::string_view name, int64_t* value, std::string_view help);
  // An integer that must fit an int32_t; a larger value is an error, never truncated.
  void Int32(std::string_view name, int32_t* value, std::string_view help);
  void Double(std::string_view name, double* value, std::string_view help);
  void Bool(std::string_view name, bool* value, std::string_view help);

  // Parses args (without the program and subcommand names). `--help` sets help_requested().
  absl::Status Parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_requested_; }
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool takes_value = true;
    std::function<absl::Status(std::string_view)> set;
  };
  const Flag* FindFlag(std::string_view name) const;

  std::string usage_;
  std::vector<Flag> flags_;
  bool help_requested_ = false;
};

// "1,2, 3" -> {1, 2, 3}; an error names the bad element.
absl::Status ParseIntList(std::string_view text, std::vector<int32_t>* out);

}  // namespace loom::cli
