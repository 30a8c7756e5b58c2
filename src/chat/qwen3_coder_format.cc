#include "chat/qwen3_coder_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

#include "grammar/json_lexemes.h"
#include "grammar/regex_parser.h"
#include "util/error.h"

namespace spindle::chat {

using grammar::RegexPtr;
using nlohmann::ordered_json;

namespace {

constexpr std::string_view kValueEnd = "</parameter>";
constexpr int kMaxLength = 10'000;

bool is_annotation(std::string_view key) {
  for (std::string_view a : {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                             "writeOnly"}) {
    if (key == a) return true;
  }
  return false;
}

// Every character but those in `chars` (ASCII).
RegexPtr chars_except(std::initializer_list<char> chars) {
  std::vector<grammar::CodeRange> ranges;
  for (char c : chars) ranges.push_back({static_cast<char32_t>(c), static_cast<char32_t>(c)});
  return grammar::re_chars(grammar::complement_ranges(grammar::normalize_ranges(std::move(ranges))));
}

// The texts that do not contain `marker`, for a marker whose first character occurs nowhere else
// in it (no prefix of it is also its suffix). The automaton: state k = the text ends with the
// marker's first k characters; from 0 any other character stays at 0 and marker[0] goes to 1;
// from k >= 1, marker[k] goes to k + 1 (k + 1 = size: found), marker[0] back to 1, any other
// character to 0. Eliminating the states 1..size-1:
//   (B | m0 L* E)* (m0 L* P)?   B = [^m0], L = | m[1..k) m0, E = | m[1..k) [^m[k] m0], P = | m[1..k)
RegexPtr text_without(std::string_view marker) {
  SPINDLE_CHECK(marker.size() >= 2 && marker.find(marker[0], 1) == std::string_view::npos,
                "text_without: the marker's first character must occur once");
  const char m0 = marker[0];
  std::vector<RegexPtr> loops, exits, prefixes;
  for (size_t k = 1; k < marker.size(); ++k) {
    const RegexPtr middle = grammar::re_literal(marker.substr(1, k - 1));
    loops.push_back(grammar::re_concat({middle, grammar::re_char(static_cast<char32_t>(m0))}));
    exits.push_back(grammar::re_concat({middle, chars_except({marker[k], m0})}));
    prefixes.push_back(middle);
  }
  const RegexPtr opened = grammar::re_concat(
      {grammar::re_char(static_cast<char32_t>(m0)), grammar::re_repeat(grammar::re_alt(std::move(loops)), 0, -1)});
  const RegexPtr back = grammar::re_alt({chars_except({m0}), grammar::re_concat({opened, grammar::re_alt(std::move(exits))})});
  return grammar::re_concat({grammar::re_repeat(back, 0, -1),
                             grammar::re_optional(grammar::re_concat({opened, grammar::re_alt(std::move(prefixes))}))});
}

int length_at(const ordered_json& s, const char* key, int fallback, const std::string& where) {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  SPINDLE_CHECK(it->is_number_integer() && *it >= 0 && *it <= kMaxLength, "{}/{}: a count from 0 to {}", where, key,
                kMaxLength);
  return it->get<int>();
}

// A text parameter's value (see the header), without its surrounding lines.
RegexPtr text_value(const ordered_json& s, const std::string& where) {
  for (const auto& [key, value] : s.items()) {
    if (is_annotation(key)) continue;
    SPINDLE_CHECK(key == "type" || key == "enum" || key == "const" || key == "pattern" || key == "format" ||
                      key == "minLength" || key == "maxLength",
                  "{}: '{}' is not supported for a text parameter of the qwen3_coder format", where, key);
  }
  std::vector<std::string> options;
  if (auto e = s.find("enum"); e != s.end()) {
    SPINDLE_CHECK(e->is_array() && !e->empty(), "{}/enum: a non-empty array", where);
    for (const auto& v : *e) {
      SPINDLE_CHECK(v.is_string(), "{}/enum: only strings, the parameter being text", where);
      options.push_back(v.get<std::string>());
    }
  }
  if (auto c = s.find("const"); c != s.end()) {
    SPINDLE_CHECK(c->is_string(), "{}/const: a string, the parameter being text", where);
    options = {c->get<std::string>()};
  }
  if (!options.empty()) {
    std::vector<RegexPtr> alts;
    for (const std::string& o : options) {
      SPINDLE_CHECK(o.find(kValueEnd) == std::string::npos, "{}: the value '{}' holds {}", where, o, kValueEnd);
      alts.push_back(grammar::re_literal(o));
    }
    return grammar::re_alt(std::move(alts));
  }
  const bool has_length = s.contains("minLength") || s.contains("maxLength");
  if (auto p = s.find("pattern"); p != s.end()) {
    SPINDLE_CHECK(p->is_string() && !has_length, "{}/pattern: a string, without minLength/maxLength", where);
    try {
      return grammar::parse_regex(p->get<std::string>(), grammar::RegexMode::kSearch);
    } catch (const Error& e) {
      SPINDLE_FAIL("{}/pattern: {}", where, e.message());
    }
  }
  if (auto f = s.find("format"); f != s.end() && f->is_string()) {
    if (auto re = grammar::json_format_regex(f->get<std::string>())) {
      SPINDLE_CHECK(!has_length, "{}/format: not together with minLength/maxLength", where);
      return *re;
    }
  }
  const int min = length_at(s, "minLength", 0, where);
  const int max = length_at(s, "maxLength", -1, where);
  SPINDLE_CHECK(max < 0 || min <= max, "{}/minLength: above maxLength", where);
  const auto marker_size = static_cast<int>(kValueEnd.size());
  if (max >= 0 && max < marker_size) return grammar::re_repeat(grammar::re_any_char(), min, max);
  if (max >= 0) return grammar::re_repeat(chars_except({'<'}), min, max);
  return grammar::re_concat({grammar::re_repeat(chars_except({'<'}), min, min), text_without(kValueEnd)});
}

// A JSON parameter's schema as a root: the function schema's $defs / definitions carried over.
ordered_json json_value_schema(const ordered_json& property, const ordered_json& root) {
  if (!property.is_object()) return property;
  ordered_json s = property;
  for (const char* key : {"$defs", "definitions"}) {
    if (root.contains(key) && !s.contains(key)) s[key] = root[key];
  }
  return s;
}

void check_object_schema(const ordered_json& s, const std::string& where) {
  SPINDLE_CHECK(s.is_object(), "{}: an object schema", where);
  for (const auto& [key, value] : s.items()) {
    if (is_annotation(key) || key == "properties" || key == "required" || key == "additionalProperties" ||
        key == "$defs" || key == "definitions" || key == "$schema" || key == "$id" || key == "strict") {
      continue;
    }
    SPINDLE_CHECK(key == "type" && value == "object",
                  "{}: '{}' cannot be written by the qwen3_coder format, which writes declared parameters one by one",
                  where, key);
  }
  if (auto p = s.find("properties"); p != s.end()) SPINDLE_CHECK(p->is_object(), "{}properties: an object", where);
  if (auto r = s.find("required"); r != s.end()) {
    SPINDLE_CHECK(r->is_array(), "{}required: an array", where);
    for (const auto& name : *r) {
      SPINDLE_CHECK(name.is_string() && s.contains("properties") && s["properties"].contains(name.get<std::string>()),
                    "{}required: '{}' is not a declared property", where, name.dump());
    }
  }
}

}  // namespace

bool is_text_parameter(const ordered_json& schema) {
  if (!schema.is_object()) return false;
  if (auto t = schema.find("type"); t != schema.end()) return *t == "string";
  if (auto c = schema.find("const"); c != schema.end()) return c->is_string();
  auto e = schema.find("enum");
  return e != schema.end() && e->is_array() && !e->empty() &&
         std::all_of(e->begin(), e->end(), [](const ordered_json& v) { return v.is_string(); });
}

TextParameters text_parameters(const ordered_json& tools) {
  TextParameters out;
  if (!tools.is_array()) return out;
  for (const auto& tool : tools) {
    const ordered_json* f = tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
    if (f == nullptr || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) continue;
    std::set<std::string>& names = out[(*f)["name"].get<std::string>()];
    auto p = f->find("parameters");
    if (p == f->end() || !p->is_object() || !p->contains("properties") || !(*p)["properties"].is_object()) continue;
    for (const auto& [name, schema] : (*p)["properties"].items()) {
      if (is_text_parameter(schema)) names.insert(name);
    }
  }
  return out;
}

int32_t add_xml_parameters(grammar::Grammar& g, const ordered_json& function, size_t index,
                           const grammar::JsonGrammarOptions& options) {
  // Errors read "tools[k].function.parameters: at <JSON pointer>...: <what>" (the server's 400
  // names the text before ": ").
  const std::string where = fmt::format("tools[{}].function.parameters: at /", index);
  auto p = function.find("parameters");
  if (p == function.end() || p->is_null()) return g.choice({{}}, "no_parameters");
  const ordered_json& schema = *p;
  check_object_schema(schema, where);
  std::vector<std::string> required;
  if (auto r = schema.find("required"); r != schema.end()) required = r->get<std::vector<std::string>>();
  std::vector<int32_t> lines;
  const ordered_json properties = schema.value("properties", ordered_json::object());
  for (const auto& [name, property] : properties.items()) {
    const std::string at = where + "properties/" + name;
    SPINDLE_CHECK(!name.empty() && name.find_first_of(">\n") == std::string::npos,
                  "{}: a parameter name the qwen3_coder format can write (no '>' or newline)", at);
    const std::string open = fmt::format("<parameter={}>\n", name);
    const std::string close = fmt::format("\n{}\n", kValueEnd);
    int32_t line = 0;
    if (is_text_parameter(property)) {
      // One lexeme: a value may end in what the closing line begins with.
      line = g.lexeme(grammar::re_concat({grammar::re_literal(open), text_value(property, at), grammar::re_literal(close)}));
    } else {
      grammar::Grammar value;
      try {
        value = grammar::grammar_from_json_schema_value(json_value_schema(property, schema), options);
      } catch (const Error& e) {
        SPINDLE_FAIL("{}: {}", at, e.message());
      }
      line = g.choice({{g.literal(open), g.embed(value), g.literal(close)}}, "parameter:" + name);
    }
    const bool is_required = std::find(required.begin(), required.end(), name) != required.end();
    lines.push_back(is_required ? line : g.repeat(line, 0, 1, "optional:" + name));
  }
  return g.choice({std::move(lines)}, "parameters");
}

}  // namespace spindle::chat
