#include "chat/tool_call_grammar.h"

#include <fmt/format.h>

#include <array>

#include "chat/qwen3_coder_format.h"
#include "grammar/json_schema.h"
#include "grammar/regex_parser.h"
#include "util/error.h"

namespace spindle::chat {

using nlohmann::ordered_json;

namespace {

// How a format writes one call, joins several and wraps them:
//   group_open CALL (separator CALL)* group_close,
//   CALL = before_name NAME [id_after_name] after_name ARGS [id_before_close] close
// ([x]: optional; the ids are regexes: a call id Mistral's templates write in history).
enum class Args { kJson, kXmlParameters };
struct CallSyntax {
  std::string_view before_name;
  bool json_name;  // NAME as a JSON string; else as written (letters, digits, '_', '-', '.', ':')
  std::string_view after_name;
  Args args;
  std::string_view close;
  std::string_view separator;
  std::string_view group_open;
  std::string_view group_close;
  std::string_view id_after_name = "";
  std::string_view id_before_close = "";
};

// A format: its call syntaxes (a call is written in one of them; a format with two accepts
// either, e.g. Mistral's two generations), where a call starts in free text (a prefix of each
// syntax's text) and its markers that are special tokens in some vocabularies.
struct FormatSyntax {
  std::string_view name;
  std::array<CallSyntax, 2> syntaxes;
  size_t num_syntaxes;
  std::string_view trigger;
  std::array<std::string_view, 4> special;
};

constexpr CallSyntax kHermesCall{"<tool_call>\n{\"name\": ", true, ", \"arguments\": ", Args::kJson, "}\n</tool_call>",
                                 "\n", "", ""};
constexpr CallSyntax kLlama3Call{"{\"name\": ", true, ", \"parameters\": ", Args::kJson, "}", "; ", "", ""};
constexpr CallSyntax kQwen3CoderCall{"<tool_call>\n<function=", false, ">\n", Args::kXmlParameters,
                                     "</function>\n</tool_call>", "\n", "", ""};
constexpr CallSyntax kMistralJsonCall{"{\"name\": ", true, ", \"arguments\": ", Args::kJson, "}", ", ",
                                      "[TOOL_CALLS][", "]", "", R"(, "id": "[A-Za-z0-9]{9}")"};
constexpr CallSyntax kMistralArgsCall{"[TOOL_CALLS]", false, "[ARGS]", Args::kJson, "", "", "", "",
                                      R"(\[CALL_ID\][A-Za-z0-9]{9})"};
constexpr CallSyntax kDeepSeekCall{"<｜tool▁call▁begin｜>function<｜tool▁sep｜>", false, "\n```json\n", Args::kJson,
                                   "\n```<｜tool▁call▁end｜>", "\n", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"};

constexpr std::array kFormatSyntaxes = std::to_array<FormatSyntax>({
    {"hermes", {kHermesCall}, 1, "<tool_call>", {"<tool_call>", "</tool_call>"}},
    {"llama3_json", {kLlama3Call}, 1, "{\"name\"", {}},
    {"qwen3_coder", {kQwen3CoderCall}, 1, "<tool_call>", {"<tool_call>", "</tool_call>"}},
    {"mistral", {kMistralJsonCall, kMistralArgsCall}, 2, "[TOOL_CALLS]", {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"}},
    {"deepseek_v3",
     {kDeepSeekCall},
     1,
     "<｜tool▁calls▁begin｜>",
     {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"}},
});

const FormatSyntax& syntax_of(const ToolCallFormat& format) {
  for (const FormatSyntax& f : kFormatSyntaxes) {
    if (f.name == format.name) return f;
  }
  SPINDLE_FAIL("the {} tool-call format has no call grammar", format.name);
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

grammar::JsonGrammarOptions options_of(const ordered_json& function) {
  grammar::JsonGrammarOptions options;
  if (auto strict = function.find("strict"); strict != function.end() && strict->is_boolean()) {
    options.strict = strict->get<bool>();
  }
  return options;
}

// The symbol of a tool's arguments: JSON under its parameters schema, or the XML parameter lines.
int32_t add_arguments(grammar::Grammar& g, Args kind, const ordered_json& function, size_t index) {
  if (kind == Args::kXmlParameters) return add_xml_parameters(g, function, index, options_of(function));
  try {
    return g.embed(grammar::grammar_from_json_schema_value(arguments_schema(function), options_of(function)));
  } catch (const Error& e) {
    SPINDLE_FAIL("tools[{}].function.parameters: {}", index, e.message());
  }
}

// The tool's name as the syntax writes it.
std::string written_name(const CallSyntax& syntax, const std::string& name, size_t index) {
  if (syntax.json_name) return ordered_json(name).dump();
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.' || c == ':';
    SPINDLE_CHECK(ok, "tools[{}].function.name: '{}' cannot be written in this tool-call format (letters, digits, "
                  "'_', '-', '.' and ':' only)", index, name);
  }
  return name;
}

int32_t optional_id(grammar::Grammar& g, std::string_view regex) {
  return g.repeat(g.lexeme(grammar::parse_regex(regex, grammar::RegexMode::kFullMatch)), 0, 1, "id");
}

// The calls' symbol, with the group markers: one call, or with `many` one or more.
int32_t add_calls(grammar::Grammar& g, const CallSyntax& syntax, const ForcedToolCalls& forced, bool many) {
  std::vector<std::vector<int32_t>> calls;
  for (size_t k = 0; k < forced.tools->size(); ++k) {
    const ordered_json& function = (*forced.tools)[k].at("function");
    const std::string name = function.at("name").get<std::string>();
    if (!forced.name.empty() && name != forced.name) continue;
    std::vector<int32_t> call{g.literal(fmt::format("{}{}", syntax.before_name, written_name(syntax, name, k)))};
    if (!syntax.id_after_name.empty()) call.push_back(optional_id(g, syntax.id_after_name));
    call.push_back(g.literal(syntax.after_name));
    call.push_back(add_arguments(g, syntax.args, function, k));
    if (!syntax.id_before_close.empty()) call.push_back(optional_id(g, syntax.id_before_close));
    if (!syntax.close.empty()) call.push_back(g.literal(syntax.close));
    calls.push_back(std::move(call));
  }
  SPINDLE_CHECK(!calls.empty(), "tool_choice: the function '{}' is not among the tools", forced.name);
  const int32_t call = g.choice(std::move(calls), "call");
  std::vector<int32_t> group;
  if (!syntax.group_open.empty()) group.push_back(g.literal(syntax.group_open));
  group.push_back(call);
  if (many) {
    // call (separator call)*
    std::vector<int32_t> next{call};
    if (!syntax.separator.empty()) next.insert(next.begin(), g.literal(syntax.separator));
    group.push_back(g.repeat(g.choice({std::move(next)}, "more"), 0, -1, "calls"));
  }
  if (!syntax.group_close.empty()) group.push_back(g.literal(syntax.group_close));
  return g.choice({std::move(group)}, "tool_calls");
}

// The generic format's answer object (chat/generic_tool_format.h).
grammar::Grammar generic_grammar(const ForcedToolCalls& forced) {
  static constexpr CallSyntax kCall{"{\"name\": ", true, ", \"arguments\": ", Args::kJson, "}", ", ",
                                    "{\"tool_calls\": [", "]}"};
  static constexpr CallSyntax kOneCall{"{\"name\": ", true, ", \"arguments\": ", Args::kJson, "}", "",
                                       "{\"tool_call\": ", "}"};
  grammar::Grammar g;
  const bool many = forced.parallel && forced.name.empty();
  std::vector<std::vector<int32_t>> answers{{add_calls(g, many ? kCall : kOneCall, forced, many)}};
  if (forced.allow_response) {
    const int32_t text = g.embed(grammar::grammar_from_json_schema_value(ordered_json{{"type", "string"}}));
    answers.push_back({g.literal("{\"response\": "), text, g.literal("}")});
  }
  g.set_start(g.choice(std::move(answers), "answer"));
  return g;
}

}  // namespace

std::vector<std::string> tool_call_triggers(const ToolCallFormat& format) {
  if (format.name == "generic") return {};
  return {std::string(syntax_of(format).trigger)};
}

grammar::Grammar tool_call_grammar(const ToolCallFormat& format, const ForcedToolCalls& forced) {
  SPINDLE_CHECK(forced.tools != nullptr && forced.tools->is_array() && !forced.tools->empty(),
                "tool_choice: no tools to call");
  if (format.name == "generic") return generic_grammar(forced);
  const FormatSyntax& f = syntax_of(format);
  grammar::Grammar g;
  const bool many = forced.name.empty() && forced.parallel;
  std::vector<std::vector<int32_t>> alternatives;
  for (size_t i = 0; i < f.num_syntaxes; ++i) alternatives.push_back({add_calls(g, f.syntaxes[i], forced, many)});
  g.set_start(g.choice(std::move(alternatives), "start"));
  for (std::string_view marker : f.special) {
    if (!marker.empty()) g.allow_special_token(std::string(marker));
  }
  return g;
}

}  // namespace spindle::chat
