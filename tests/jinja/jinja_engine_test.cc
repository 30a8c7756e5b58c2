// The Jinja engine's own contract: errors (kind, template name and line), the bounds on untrusted
// templates, the injectable clock, thread safety, and JSON context handling. Rendering semantics
// are checked byte for byte against jinja2 by check_corpus.py (tests/jinja/cases.json and the real
// templates); the few expected strings here are jinja2 3.1.2's output for the same template.
#include "jinja/template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace spindle::jinja {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::ordered_json;

std::string render(const std::string& source, const json& context = json::object(), const RenderOptions& options = {}) {
  return Template(source, "test.jinja").render(context, options);
}

// The error a template raises: its kind and message.
std::pair<ErrorKind, std::string> error_of(const std::string& source, const json& context = json::object(),
                                           const RenderOptions& options = {}) {
  try {
    render(source, context, options);
  } catch (const TemplateError& e) {
    return {e.kind(), e.message()};
  }
  ADD_FAILURE() << "no error from: " << source;
  return {ErrorKind::kRender, ""};
}

TEST(JinjaEngine, SyntaxErrorNamesTemplateAndLine) {
  try {
    Template("line one\n{% for x in y %}\n{{ x + }}\n{% endfor %}", "models/qwen/chat_template.jinja");
    FAIL() << "expected a syntax error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSyntax);
    EXPECT_THAT(e.message(), HasSubstr("models/qwen/chat_template.jinja line 3"));
  }
  EXPECT_EQ(error_of("{% if true %}never closed").first, ErrorKind::kSyntax);
  EXPECT_THAT(error_of("{% if true %}never closed").second, HasSubstr("'endif'"));
  EXPECT_EQ(error_of("{% include 'other.jinja' %}").first, ErrorKind::kSyntax);
  EXPECT_EQ(error_of("{% continue %}").first, ErrorKind::kSyntax);
}

TEST(JinjaEngine, RenderErrorNamesLine) {
  const auto [kind, message] = error_of("a\nb\n{{ missing.field }}");
  EXPECT_EQ(kind, ErrorKind::kRender);
  EXPECT_THAT(message, HasSubstr("test.jinja line 3"));
  EXPECT_THAT(message, HasSubstr("'missing' is undefined"));
}

TEST(JinjaEngine, RaiseExceptionCarriesTheTemplatesMessage) {
  const auto [kind, message] = error_of("{{ raise_exception('Conversation roles must alternate') }}");
  EXPECT_EQ(kind, ErrorKind::kRaised);
  EXPECT_EQ(message, "Conversation roles must alternate");
}

TEST(JinjaEngine, LoopIterationsAreBounded) {
  RenderOptions options;
  options.limits.max_loop_iterations = 2000;  // range() items count too: 30 + 30 + 900 + 900 here
  EXPECT_NO_THROW(render("{% for i in range(30) %}{% for j in range(30) %}{% endfor %}{% endfor %}", json::object(), options));
  const auto [kind, message] =
      error_of("{% for i in range(40) %}{% for j in range(40) %}{% endfor %}{% endfor %}", json::object(), options);
  EXPECT_EQ(kind, ErrorKind::kLimit);
  EXPECT_THAT(message, HasSubstr("2000 loop iterations"));
  // range() itself counts: a huge range is refused before it is built.
  EXPECT_EQ(error_of("{{ range(100000000000) | length }}").first, ErrorKind::kLimit);
}

TEST(JinjaEngine, MacroRecursionIsBounded) {
  const auto [kind, message] = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(kind, ErrorKind::kLimit);
  EXPECT_THAT(message, HasSubstr("macro calls nested"));
  RenderOptions options;
  options.limits.max_call_depth = 5;
  const std::string countdown = "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}";
  EXPECT_EQ(render(countdown + "{{ f(4) }}", json::object(), options), "4321");
  EXPECT_EQ(error_of(countdown + "{{ f(5) }}", json::object(), options).first, ErrorKind::kLimit);
}

TEST(JinjaEngine, OutputAndStringsAreBounded) {
  RenderOptions options;
  options.limits.max_output_bytes = 1000;
  EXPECT_EQ(render("{% for i in range(99) %}0123456789{% endfor %}", json::object(), options).size(), 990u);
  EXPECT_EQ(error_of("{% for i in range(101) %}0123456789{% endfor %}", json::object(), options).first, ErrorKind::kLimit);
  // A string doubled in a loop hits the bound on one string, not the memory.
  EXPECT_EQ(error_of("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .first,
            ErrorKind::kLimit);
  EXPECT_EQ(error_of("{{ 'ab' * 100000000000 }}").first, ErrorKind::kLimit);
  // Many short strings add up to the work bound.
  options = {};
  options.limits.max_work_bytes = 100000;
  EXPECT_EQ(error_of("{% for i in range(100000) %}{% set s = 'abc' ~ i %}{% endfor %}", json::object(), options).first,
            ErrorKind::kLimit);
}

TEST(JinjaEngine, DeepNestingIsRefused) {
  const std::string deep_parens = "{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}";
  EXPECT_EQ(error_of(deep_parens).first, ErrorKind::kSyntax);
  std::string deep_ifs;
  for (int i = 0; i < 200; ++i) deep_ifs += "{% if true %}";
  EXPECT_EQ(error_of(deep_ifs).first, ErrorKind::kSyntax);
  // Lists nested through a namespace stop at the value depth bound.
  const auto [kind, message] =
      error_of("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}");
  EXPECT_EQ(kind, ErrorKind::kRender);
  EXPECT_THAT(message, HasSubstr("nested more than"));
  // A namespace holding itself neither loops nor leaks.
  EXPECT_EQ(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").first, ErrorKind::kRender);
}

TEST(JinjaEngine, StrftimeNowUsesTheInjectedClock) {
  RenderOptions options;
  options.now = [] { return std::chrono::system_clock::time_point(std::chrono::seconds(1768473000)); };
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%d %b %Y') }}", json::object(), options),
            "2026-01-15 10:30|15 Jan 2026");
}

TEST(JinjaEngine, ContextKeepsKeyOrderAndTypes) {
  const json context = json::parse(R"({"tool": {"zeta": 1, "alpha": 2.0, "mid": [true, null, "s"]}})");
  // jinja2 3.1.2: {{ tool }} -> {'zeta': 1, 'alpha': 2.0, 'mid': [True, None, 's']}
  EXPECT_EQ(render("{{ tool }}|{{ tool | tojson }}", context),
            "{'zeta': 1, 'alpha': 2.0, 'mid': [True, None, 's']}|{\"zeta\": 1, \"alpha\": 2.0, \"mid\": [true, null, \"s\"]}");
  EXPECT_EQ(error_of("{{ x }}", json::array()).first, ErrorKind::kRender);
}

TEST(JinjaEngine, OneTemplateRendersOnManyThreads) {
  const Template t("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m %}{% endfor %}{{ ns.n }}",
                   "threads.jinja");
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      json context = {{"messages", json::array()}};
      for (int k = 0; k <= i * 100; ++k) context["messages"].push_back(k);
      for (int rep = 0; rep < 20; ++rep) results[i] = t.render(context);
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(results[i], std::to_string((i * 100) * (i * 100 + 1) / 2));
}

TEST(JinjaEngine, InvalidUtf8PassesThroughUnchanged) {
  const std::string bytes = "a\xff\xfe" "b";
  EXPECT_EQ(render(bytes + "{{ 'x' }}"), bytes + "x");
  EXPECT_EQ(render("{{ s | length }}|{{ s[1:3] }}", json{{"s", "h\xc3\xa9llo"}}), "5|\xc3\xa9l");
}

}  // namespace
}  // namespace spindle::jinja
