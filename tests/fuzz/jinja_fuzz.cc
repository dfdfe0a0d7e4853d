// libFuzzer entry point for the Jinja interpreter: the input is a template, optionally followed
// by "\n----\n" and a JSON object of variables. Parsing and rendering (with tight limits) must
// never crash, hang, leak or exhaust the stack, whatever the input.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/text/jinja/template.h"
#include "server/text/jinja/value.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using loom::text::jinja::ParseJson;
  using loom::text::jinja::RenderOptions;
  using loom::text::jinja::Template;
  using loom::text::jinja::Value;

  const std::string_view input(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSeparator = "\n----\n";
  const size_t split = input.find(kSeparator);
  const std::string_view source = input.substr(0, split);

  Value context = Value::EmptyDict();
  if (split != std::string_view::npos) {
    auto parsed = ParseJson(input.substr(split + kSeparator.size()));
    if (parsed.ok() && parsed->IsDict()) context = *parsed;
  }

  auto compiled = Template::Parse(source);
  if (!compiled.ok()) return 0;
  RenderOptions options;
  options.max_output_bytes = 1 << 20;
  options.max_steps = 200'000;
  options.max_range = 10'000;
  options.now_unix_seconds = 1721901600;
  (void)compiled->Render(context, options);
  return 0;
}
