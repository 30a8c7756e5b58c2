// libFuzzer target: template text plus a JSON context -> jinja::Template, then render.
// Input layout: the template text, a NUL byte, the context as JSON (an invalid or missing context
// is replaced by a small chat conversation, so that template-only inputs still render).
// Contract under test: any template and context either render or throw jinja::TemplateError
// (syntax, render, raised, limit) within the bounds given here; any other exception, a crash, a
// sanitizer report or a timeout is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "jinja/template.h"

namespace {

const nlohmann::ordered_json& default_context() {
  static const auto context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},
                 {"role": "assistant", "content": null, "tool_calls": [{"id": "abc123XYZ", "type": "function",
                  "function": {"name": "f", "arguments": {"x": 1, "y": [1.5, true, null]}}}]},
                 {"role": "tool", "tool_call_id": "abc123XYZ", "content": "ok"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
               "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false})");
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  nlohmann::ordered_json context = default_context();
  if (nul != std::string_view::npos) {
    auto parsed = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object()) context = std::move(parsed);
  }
  spindle::jinja::RenderOptions options;
  options.limits.max_loop_iterations = 20000;
  options.limits.max_call_depth = 32;
  options.limits.max_output_bytes = 64 << 10;
  options.limits.max_work_bytes = 4 << 20;
  options.now = [] { return std::chrono::system_clock::time_point(std::chrono::seconds(1768473000)); };
  try {
    const spindle::jinja::Template t(source, "fuzz.jinja");
    const std::string out = t.render(context, options);
    if (out.size() > options.limits.max_output_bytes) std::abort();
  } catch (const spindle::jinja::TemplateError&) {
  }
  return 0;
}
