#include "server/cli/flags.h"

#include <charconv>
#include <cmath>

#include "engine/common/strings.h"

namespace loom::cli {
namespace {

absl::Status ParseInt64(std::string_view text, int64_t* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  if (ec != std::errc() || ptr != end || text.empty()) {
    return absl::InvalidArgumentError(StrCat("'", text, "' is not an integer"));
  }
  return absl::OkStatus();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

void FlagSet::String(std::string_view name, std::string* value, std::string_view help) {
  flags_.push_back({std::string(name), std::string(help), *value, true,
                    [value](std::string_view v) {
                      *value = std::string(v);
                      return absl::OkStatus();
                    }});
}

void FlagSet::Strings(std::string_view name, std::vector<std::string>* values,
                      std::string_view help) {
  flags_.push_back({std::string(name), std::string(help), "", true, [values](std::string_view v) {
                      values->emplace_back(v);
                      return absl::OkStatus();
                    }});
}

void FlagSet::Int(std::string_view name, int64_t* value, std::string_view help) {
  flags_.push_back({std::string(name), std::string(help), std::to_string(*value), true,
                    [value](std::string_view v) { return ParseInt64(v, value); }});
}

void FlagSet::Int32(std::string_view name, int32_t* value, std::string_view help) {
  flags_.push_back({std::string(name), std::string(help), std::to_string(*value), true,
                    [value](std::string_view v) {
                      int64_t parsed = 0;
                      absl::Status status = ParseInt64(v, &parsed);
                      if (!status.ok()) return status;
                      if (parsed < INT32_MIN || parsed > INT32_MAX) {
                        return absl::InvalidArgumentError(StrCat("'", v, "' is out of range"));
                      }
                      *value = static_cast<int32_t>(parsed);
                      return absl::OkStatus();
                    }});
}

void FlagSet::Double(std::string_view name, double* value, std::string_view help) {
  flags_.push_back({std::string(name), std::string(help), StrCat(*value), true,
                    [value](std::string_view v) {
                      char* end = nullptr;
                      const std::string text(v);
                      const double parsed = std::strtod(text.c_str(), &end);
                      if (text.empty() || *end != '\0' || !std::isfinite(parsed)) {
                        return absl::InvalidArgumentError(StrCat("'", v, "' is not a number"));
                      }
                      *value = parsed;
                      return absl::OkStatus();
                    }});
}

void FlagSet::Bool(std::string_view name, bool* value, std::string_view help) {
  flags_.push_back({std::string(name), std::string(help), *value ? "true" : "false", false,
                    [value](std::string_view v) {
                      if (v.empty() || v == "true" || v == "1") {
                        *value = true;
                      } else if (v == "false" || v == "0") {
                        *value = false;
                      } else {
                        return absl::InvalidArgumentError(StrCat("'", v, "' is not a boolean"));
                      }
                      return absl::OkStatus();
                    }});
}

const FlagSet::Flag* FlagSet::FindFlag(std::string_view name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      continue;
    }
    if (arg.substr(0, 2) != "--") {
      return absl::InvalidArgumentError(StrCat("unexpected argument '", arg, "'"));
    }
    arg.remove_prefix(2);
    std::string_view name = arg, value;
    const size_t eq = arg.find('=');
    const bool inline_value = eq != std::string_view::npos;
    if (inline_value) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const Flag* flag = FindFlag(name);
    if (flag == nullptr) return absl::InvalidArgumentError(StrCat("unknown flag --", name));
    if (flag->takes_value && !inline_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(StrCat("--", name, " needs a value"));
      value = args[++i];
    }
    absl::Status status = flag->set(value);
    if (!status.ok()) return absl::InvalidArgumentError(StrCat("--", name, ": ", status.message()));
  }
  return absl::OkStatus();
}

std::string FlagSet::Help() const {
  std::string out = StrCat(usage_, "\n\nFlags:\n");
  for (const Flag& flag : flags_) {
    out += StrCat("  --", flag.name, flag.takes_value ? " VALUE" : "", "\n      ", flag.help);
    if (!flag.default_text.empty()) out += StrCat(" (default: ", flag.default_text, ")");
    out += "\n";
  }
  return out;
}

absl::Status ParseIntList(std::string_view text, std::vector<int32_t>* out) {
  out->clear();
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = Trim(text.substr(0, comma));
    int64_t value = 0;
    absl::Status status = ParseInt64(item, &value);
    if (!status.ok()) return status;
    if (value < INT32_MIN || value > INT32_MAX) {
      return absl::InvalidArgumentError(StrCat(value, " is out of range"));
    }
    out->push_back(static_cast<int32_t>(value));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (out->empty()) return absl::InvalidArgumentError("empty list");
  return absl::OkStatus();
}

}  // namespace loom::cli
