// Compiles a parsed regex (ast.h) into a Program (program.h).
#pragma once

#include "absl/status/statusor.h"
#include "server/text/regex/ast.h"
#include "server/text/regex/program.h"

namespace loom::text::regex_internal {

// Fails (InvalidArgument) when the expanded program would exceed kMaxProgramInsts.
absl::StatusOr<Program> CompileProgram(const ParsedPattern& pattern);

}  // namespace loom::text::regex_internal
