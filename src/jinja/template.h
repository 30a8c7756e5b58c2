// Spindle's Jinja engine: a chat template parsed once, rendered per request in transformers'
// environment (jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop
// controls, transformers' tojson, raise_exception and strftime_now). See renderer.h for the
// bounds on untrusted templates and template_error.h for the errors.
//
//   jinja::Template t(text, "tokenizer_config.json chat_template");
//   std::string prompt = t.render({{"messages", ...}, {"add_generation_prompt", true}, ...});
#pragma once

#include "jinja/ast.h"
#include "jinja/renderer.h"
#include "jinja/template_error.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace spindle::jinja {

class Template {
 public:
  // Parses `source`; a syntax error is a TemplateError (kSyntax) naming `name` and the line.
  explicit Template(std::string_view source, std::string name = "<template>");

  // `context` is a JSON object: its keys become the template's variables (objects keep their key
  // order, as Python's json.loads does). Thread-safe: a Template may render on many threads.
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const Body> body_;
};

}  // namespace spindle::jinja
