#include "chat/tool_call_grammar.h"

#include <fmt/format.h>

#include "grammar/json_schema.h"
#include "util/error.h"

namespace spindle::chat {

using nlohmann::ordered_json;

namespace {

// How a format writes one call and joins several.
struct CallSyntax {
  std::string_view open;       // before the JSON body
  std::string_view args_key;   // the key of the arguments object
  std::string_view close;      // after the JSON body
  std::string_view separator;  // between two calls
  std::string_view trigger;    // where a call starts in free text (a prefix of open + the body)
};

const CallSyntax* syntax_of(const ToolCallFormat& format) {
  static constexpr CallSyntax kHermes{"<tool_call>\n", "arguments", "\n</tool_call>", "\n", "<tool_call>"};
  static constexpr CallSyntax kLlama3{"", "parameters", "", "; ", "{\"name\""};
  if (format.name == "hermes") return &kHermes;
  if (format.name == "llama3_json") return &kLlama3;
  return nullptr;
}

// The arguments schema of a tool: its parameters, {} only when it has none, an object schema when
// the schema names no type.
ordered_json arguments_schema(const ordered_json& function) {
  auto p = function.find("parameters");
  if (p == function.end() || p->is_null()) {
    return ordered_json{{"type", "object"}, {"properties", ordered_json::object()}, {"additionalProperties", false}};
  }
  ordered_json schema = *p;
  if (schema.is_object() && !schema.contains("type")) schema["type"] = "object";
  return schema;
}

// One call of tool `function`: open {"name": NAME, "<args_key>": ARGS} close.
int32_t add_call(grammar::Grammar& g, const CallSyntax& syntax, const ordered_json& function, size_t index) {
  const std::string name = function.at("name").get<std::string>();
  grammar::JsonGrammarOptions options;
  if (auto strict = function.find("strict"); strict != function.end() && strict->is_boolean()) {
    options.strict = strict->get<bool>();
  }
  grammar::Grammar args;
  try {
    args = grammar::grammar_from_json_schema_value(arguments_schema(function), options);
  } catch (const Error& e) {
    SPINDLE_FAIL("tools[{}].function.parameters: {}", index, e.message());
  }
  const int32_t args_symbol = g.embed(args);
  const std::string head = fmt::format("{}{{\"name\": {}, \"{}\": ", syntax.open, ordered_json(name).dump(),
                                       syntax.args_key);
  const std::string tail = fmt::format("}}{}", syntax.close);
  return g.choice({{g.literal(head), args_symbol, g.literal(tail)}}, "call:" + name);
}

// The generic format's answer object (chat/generic_tool_format.h).
grammar::Grammar generic_grammar(const ForcedToolCalls& forced) {
  static constexpr CallSyntax kCall{"", "arguments", "", ", ", ""};
  grammar::Grammar g;
  std::vector<std::vector<int32_t>> calls;
  for (size_t k = 0; k < forced.tools->size(); ++k) {
    const ordered_json& function = (*forced.tools)[k].at("function");
    if (!forced.name.empty() && function.at("name") != forced.name) continue;
    calls.push_back({add_call(g, kCall, function, k)});
  }
  SPINDLE_CHECK(!calls.empty(), "tool_choice: the function '{}' is not among the tools", forced.name);
  const int32_t call = g.choice(std::move(calls), "call");
  std::vector<std::vector<int32_t>> answers;
  if (forced.parallel && forced.name.empty()) {
    const int32_t more = g.repeat(g.choice({{g.literal(kCall.separator), call}}, "more"), 0, -1, "calls");
    answers.push_back({g.literal("{\"tool_calls\": ["), call, more, g.literal("]}")});
  } else {
    answers.push_back({g.literal("{\"tool_call\": "), call, g.literal("}")});
  }
  if (forced.allow_response) {
    const int32_t text = g.embed(grammar::grammar_from_json_schema_value(ordered_json{{"type", "string"}}));
    answers.push_back({g.literal("{\"response\": "), text, g.literal("}")});
  }
  g.set_start(g.choice(std::move(answers), "answer"));
  return g;
}

}  // namespace

std::string tool_call_grammar_unsupported(const ToolCallFormat& format) {
  if (syntax_of(format) != nullptr || format.name == "generic") return "";
  return fmt::format(
      "the {} tool-call parser's format cannot be enforced yet (tool_choice \"required\" and a named function are "
      "built for the hermes and llama3_json parsers)",
      format.name);
}

std::vector<std::string> tool_call_triggers(const ToolCallFormat& format) {
  if (format.name == "generic") return {};
  const CallSyntax* syntax = syntax_of(format);
  SPINDLE_CHECK(syntax != nullptr, "{}", tool_call_grammar_unsupported(format));
  return {std::string(syntax->trigger)};
}

grammar::Grammar tool_call_grammar(const ToolCallFormat& format, const ForcedToolCalls& forced) {
  SPINDLE_CHECK(forced.tools != nullptr && forced.tools->is_array() && !forced.tools->empty(),
                "tool_choice: no tools to call");
  if (format.name == "generic") return generic_grammar(forced);
  const CallSyntax* syntax = syntax_of(format);
  SPINDLE_CHECK(syntax != nullptr, "{}", tool_call_grammar_unsupported(format));
  grammar::Grammar g;
  std::vector<std::vector<int32_t>> calls;
  for (size_t k = 0; k < forced.tools->size(); ++k) {
    const ordered_json& function = (*forced.tools)[k].at("function");
    if (!forced.name.empty() && function.at("name") != forced.name) continue;
    calls.push_back({add_call(g, *syntax, function, k)});
  }
  SPINDLE_CHECK(!calls.empty(), "tool_choice: the function '{}' is not among the tools", forced.name);
  const int32_t call = g.choice(std::move(calls), "call");
  int32_t start = call;
  if (forced.name.empty() && forced.parallel) {
    // call (separator call)*
    const int32_t more = g.choice({{g.literal(syntax->separator), call}}, "more");
    start = g.choice({{call, g.repeat(more, 0, -1, "calls")}}, "calls");
  }
  g.set_start(start);
  return g;
}

}  // namespace spindle::chat
