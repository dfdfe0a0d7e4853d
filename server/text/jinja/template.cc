#include "server/text/jinja/template.h"

#include "engine/common/status.h"
#include "server/text/jinja/interpreter.h"
#include "server/text/jinja/parser.h"

namespace loom::text::jinja {

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  LOOM_ASSIGN_OR_RETURN(Body body, ParseTemplate(source));
  return Template(std::make_shared<const Body>(std::move(body)));
}

absl::StatusOr<std::string> Template::Render(const Value& context, const RenderOptions& options) const {
  Interpreter interpreter(options);
  return interpreter.Run(*body_, context);
}

}  // namespace loom::text::jinja
