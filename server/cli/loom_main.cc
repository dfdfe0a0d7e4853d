// The `loom` command-line tool: `loom generate ...`, `loom version`.
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "server/cli/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: loom <command> [flags]\n"
    "\n"
    "commands:\n"
    "  generate   run prompts on a model and print tokens and timings\n"
    "  version    print the version and the CPU features in use\n"
    "\n"
    "`loom <command> --help` lists a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "generate") return loom::cli::GenerateCommand(args);
  if (command == "version" || command == "--version") {
    std::printf("loom %s\ncpu: %s\n", LOOM_VERSION, loom::cpu::DescribeCpu().c_str());
    return 0;
  }
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "loom: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
