// Subcommands of the `loom` tool. Each takes the arguments after its name and returns the
// process exit code (0 ok, 2 usage or input error, 1 runtime failure).
#pragma once

#include <string>
#include <vector>

namespace loom::cli {

int GenerateCommand(const std::vector<std::string>& args);

}  // namespace loom::cli
