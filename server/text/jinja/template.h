// A compiled Jinja template: the public entry point of the interpreter.
//
//   LOOM_ASSIGN_OR_RETURN(Template t, Template::Parse(source));
//   LOOM_ASSIGN_OR_RETURN(std::string text, t.Render(context, RenderOptions{}));
//
// The environment is Hugging Face's chat-template environment: jinja2's
// ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True, the loopcontrols
// extension (break/continue), the `{% generation %}` tag (renders its body), HF's tojson filter
// (key order kept, ensure_ascii=False) and the globals raise_exception and strftime_now, plus
// jinja2's range, namespace and dict. Autoescaping is off.
//
// A Template is immutable after Parse; Render is const and may run on many threads at once (each
// render builds its own values). Syntax and runtime errors are InvalidArgument naming line and
// column; hostile templates hit the limits in RenderOptions and fail instead of hanging or
// exhausting memory or the stack.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/text/jinja/ast.h"
#include "server/text/jinja/value.h"

namespace loom::text::jinja {

// Limits and injected inputs of one render.
struct RenderOptions {
  // Largest output, and largest string value built during the render.
  int64_t max_output_bytes = int64_t{16} << 20;
  // Evaluation steps (expression nodes and statements executed), bounding loops of any kind.
  int64_t max_steps = 10'000'000;
  // Deepest evaluator recursion: nested expressions, blocks and macro calls.
  int max_depth = 200;
  // Longest list range() may produce.
  int64_t max_range = 1'000'000;
  // The time strftime_now formats, in seconds since the Unix epoch, rendered as UTC.
  int64_t now_unix_seconds = 0;
};

// A parsed template; cheap to copy (the tree is shared).
class Template {
 public:
  // Compiles `source`. Syntax errors are InvalidArgument with line and column.
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Renders with the variables of `context` (a dict; key order is kept).
  absl::StatusOr<std::string> Render(const Value& context, const RenderOptions& options) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace loom::text::jinja
