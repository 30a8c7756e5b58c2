#include "jinja/template.h"

#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace spindle::jinja {

Template::Template(std::string_view source, std::string name) : name_(std::move(name)) {
  body_ = std::make_shared<const Body>(parse(lex(source, name_), name_));
}

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  JINJA_CHECK(context.is_object(), "the context of template {} must be a JSON object, not {}", name_,
              context.type_name());
  std::vector<std::pair<std::string, Value>> vars;
  vars.reserve(context.size());
  for (const auto& [key, value] : context.items()) vars.emplace_back(key, from_json(value));
  Renderer renderer(options, name_);
  return renderer.render(*body_, vars);
}

}  // namespace spindle::jinja
