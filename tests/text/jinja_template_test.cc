// Parser and interpreter behaviour that the jinja2 fixtures cannot show: error positions, limits
// against hostile templates, concurrency. Rendering output itself is checked byte for byte
// against jinja2 in chat_template_fixture_test.cc.

#include "server/text/jinja/template.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace loom::text::jinja {
namespace {

absl::StatusOr<std::string> Render(std::string_view source, std::string_view context_json = "{}",
                                   RenderOptions options = {}) {
  absl::StatusOr<Template> t = Template::Parse(source);
  if (!t.ok()) return t.status();
  absl::StatusOr<Value> context = ParseJson(context_json);
  if (!context.ok()) return context.status();
  return t->Render(*context, options);
}

std::string Message(const absl::StatusOr<std::string>& result) {
  return result.ok() ? "OK: " + *result : std::string(result.status().message());
}

TEST(JinjaTemplateTest, RendersBasics) {
  EXPECT_EQ(*Render("Hello {{ name }}!", R"({"name": "Ada"})"), "Hello Ada!");
  EXPECT_EQ(*Render("{% for x in xs %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
                    R"({"xs": [1, 2.0, "a"]})"),
            "1,2.0,a");
  EXPECT_EQ(*Render("{{ d | tojson }}", R"({"d": {"z": 1, "a": 2}})"), "{\"z\": 1, \"a\": 2}");
  EXPECT_EQ(*Render("a\n"), "a");  // one trailing newline is dropped, as jinja2 does
  EXPECT_EQ(*Render("a\r\nb"), "a\nb");
}

TEST(JinjaTemplateTest, SyntaxErrorsNameLineAndColumn) {
  absl::StatusOr<std::string> r = Render("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Message(r).find("line 3, column 8"), std::string::npos) << Message(r);

  for (std::string_view bad : {"{% if x %}no end", "{{ 'unterminated }}", "{% for %}{% endfor %}",
                               "{{ (1 }}", "{% frobnicate %}", "{# open comment", "{{ x | }}",
                               "{% endif %}", "{{ a b }}", "{% set %}", "{% macro m( %}{% endmacro %}",
                               "{{ ] }}", "{% raw %}never closed"}) {
    absl::StatusOr<std::string> result = Render(bad);
    EXPECT_FALSE(result.ok()) << bad;
    if (!result.ok()) {
      EXPECT_NE(Message(result).find("line "), std::string::npos) << Message(result);
    }
  }
}

TEST(JinjaTemplateTest, LoopControlOutsideALoopIsASyntaxError) {
  // Even in a branch that never runs, as jinja2 checks it when compiling.
  EXPECT_FALSE(Render("{% if false %}{% break %}{% endif %}").ok());
  EXPECT_FALSE(Render("{% for x in [1] %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}").ok());
  EXPECT_EQ(*Render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "1");
}

TEST(JinjaTemplateTest, UnknownFiltersAndTestsFailWhenCompiledUnlessConditional) {
  EXPECT_FALSE(Template::Parse("{{ x | no_such_filter }}").ok());
  EXPECT_FALSE(Template::Parse("{{ x is no_such_test }}").ok());
  EXPECT_FALSE(Template::Parse("{% if c %}{% for i in x %}{{ i | no_such_filter }}{% endfor %}{% endif %}").ok());
  // Inside an if statement or a conditional expression jinja2 defers the error to evaluation.
  EXPECT_EQ(*Render("{% if false %}{{ x | no_such_filter }}{% endif %}ok"), "ok");
  EXPECT_EQ(*Render("{{ x | no_such_filter if false else 'ok' }}"), "ok");
  EXPECT_FALSE(Render("{% if true %}{{ x | no_such_filter }}{% endif %}").ok());
}

TEST(JinjaTemplateTest, RuntimeErrorsNameLineAndColumn) {
  absl::StatusOr<std::string> r = Render("ok\n  {{ missing.attr }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Message(r).find("line 2, column 6"), std::string::npos) << Message(r);
  EXPECT_NE(Message(r).find("'missing' is undefined"), std::string::npos) << Message(r);

  r = Render("{{ raise_exception('Bad roles!') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Message(r).ends_with("Bad roles!")) << Message(r);
}

TEST(JinjaTemplateTest, UndefinedBehavesLikeJinja2Default) {
  EXPECT_EQ(*Render("[{{ u }}][{% for x in u %}x{% endfor %}][{{ u is defined }}][{{ u | length }}]"),
            "[][][False][0]");
  EXPECT_EQ(*Render("{{ n is none }} {{ n is defined }} {{ n }}", R"({"n": null})"), "True True None");
  EXPECT_EQ(*Render("{{ d.missing is defined }}", R"({"d": {}})"), "False");
  EXPECT_FALSE(Render("{{ d.missing.deeper }}", R"({"d": {}})").ok());
  EXPECT_FALSE(Render("{{ u + 1 }}").ok());
  EXPECT_EQ(*Render("{{ 'yes' if false }}|{{ u | default('d') }}"), "|d");
}

TEST(JinjaTemplateTest, SandboxRefusesMutation) {
  EXPECT_FALSE(Render("{% set xs = [1] %}{{ xs.append(2) }}").ok());
  EXPECT_FALSE(Render("{% set d = {} %}{{ d.update({'a': 1}) }}").ok());
  EXPECT_FALSE(Render("{% set d = {} %}{% set d.a = 1 %}").ok());
}

TEST(JinjaTemplateTest, DeepNestingIsAnErrorNotACrash) {
  const std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_FALSE(Render(parens).ok());
  std::string chain = "{{ x";
  for (int i = 0; i < 50000; ++i) chain += " + x";
  chain += " }}";
  EXPECT_FALSE(Render(chain).ok());
  std::string ifs;
  for (int i = 0; i < 10000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(Render(ifs).ok());
  std::string nots = "{{ " ;
  for (int i = 0; i < 100000; ++i) nots += "not ";
  EXPECT_FALSE(Render(nots + "x }}").ok());
}

TEST(JinjaTemplateTest, RecursionIsBounded) {
  absl::StatusOr<std::string> r = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Message(r).find("recursion"), std::string::npos) << Message(r);
  // Moderate recursion is fine.
  EXPECT_EQ(*Render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}done{% endif %}{% endmacro %}{{ f(20) }}"),
            "done");
}

TEST(JinjaTemplateTest, OutputAndWorkAreBounded) {
  RenderOptions small;
  small.max_output_bytes = 1000;
  absl::StatusOr<std::string> r = Render("{% for i in range(2000) %}x{% endfor %}", "{}", small);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Message(r).find("output"), std::string::npos);
  EXPECT_FALSE(Render("{{ 'x' * 100000000000 }}").ok());
  EXPECT_FALSE(Render("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}").ok());
  EXPECT_FALSE(Render("{{ range(10000000000) }}").ok());
  EXPECT_FALSE(Render("{{ [1, 2] * 100000000000 }}").ok());

  RenderOptions few_steps;
  few_steps.max_steps = 10000;
  r = Render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "{}", few_steps);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Message(r).find("steps"), std::string::npos) << Message(r);
}

TEST(JinjaTemplateTest, IntegerOverflowIsAnError) {
  EXPECT_FALSE(Render("{{ 9223372036854775807 + 1 }}").ok());
  EXPECT_FALSE(Render("{{ 2 ** 64 }}").ok());
  EXPECT_FALSE(Render("{{ 99999999999999999999 }}").ok());
  EXPECT_FALSE(Render("{{ 1 // 0 }}").ok());
  EXPECT_FALSE(Render("{{ 1.5 % 0 }}").ok());
}

TEST(JinjaTemplateTest, SelfReferencingNamespaceDoesNotHangOrLeak) {
  // Printing a cycle stops at a depth limit; the render cuts the cycle afterwards (LeakSanitizer).
  absl::StatusOr<std::string> r =
      Render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me.me is defined }}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "True");
  EXPECT_FALSE(Render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns | tojson }}").ok());
}

TEST(JinjaTemplateTest, StrftimeNowUsesTheInjectedTime) {
  RenderOptions options;
  options.now_unix_seconds = 1721901600;  // 2024-07-25 10:00:00 UTC
  EXPECT_EQ(*Render("{{ strftime_now('%d %b %Y %H:%M') }}", "{}", options), "25 Jul 2024 10:00");
}

TEST(JinjaTemplateTest, ConcurrentRendersOfOneTemplate) {
  absl::StatusOr<Template> t = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m | length %}{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<Value> context = ParseJson(R"({"messages": ["ab", "cde", "f"]})");
  ASSERT_TRUE(context.ok());
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) {
        absl::StatusOr<std::string> r = t->Render(*context, RenderOptions{});
        results[i] = r.ok() ? *r : "error";
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& r : results) EXPECT_EQ(r, "6");
}

}  // namespace
}  // namespace loom::text::jinja
