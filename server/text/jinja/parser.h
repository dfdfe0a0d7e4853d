// Parser: tokens -> syntax tree, with jinja2's grammar and operator precedence.
//
// Supported statements: if/elif/else, for (tuple targets, `if` filter, else, recursive), set
// (name, tuple, namespace attribute, block form with optional filter), macro, call blocks,
// filter blocks, with, break/continue, generation. Nesting of expressions and blocks is bounded
// (kMaxParseDepth) so hostile input cannot exhaust the stack. Pure function; any thread.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "server/text/jinja/ast.h"

namespace loom::text::jinja {

// Deepest nesting of expressions plus blocks the parser accepts.
inline constexpr int kMaxParseDepth = 128;

// Parses template source. Syntax errors are InvalidArgument naming line and column.
absl::StatusOr<Body> ParseTemplate(std::string_view source);

}  // namespace loom::text::jinja
