#include "server/structured_output.h"

#include <fmt/format.h>

#include <list>
#include <mutex>
#include <set>
#include <unordered_map>

#include "grammar/gbnf.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/simple_grammars.h"
#include "server/openai_protocol.h"
#include "util/error.h"

namespace spindle::server {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Kind = OutputConstraint::Kind;

const json* field(const json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const json& v, const std::string& param) {
  if (!v.is_string()) bad_request(param, fmt::format("'{}' must be a string", param));
  return v.get<std::string>();
}

// Every key of `object` is one of `known`; else a 400 naming it under `path`.
void check_keys(const json& object, const std::set<std::string>& known, const std::string& path, const char* why) {
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) == 0) {
      bad_request(path + key, fmt::format("'{}{}' is not supported{}", path, key, why));
    }
  }
}

class ConstraintReader {
 public:
  ConstraintReader(const json& j, const std::string& body) : j_(j), body_(body) {}

  OutputConstraint read() {
    if (const json* v = field(j_, "response_format")) response_format(*v);
    if (const json* v = field(j_, "structured_outputs")) structured_outputs(*v);
    if (field(j_, "guided_json")) set(schema({"guided_json"}, "guided_json"));
    if (const json* v = field(j_, "guided_regex")) set(text(Kind::kRegex, *v, "guided_regex"));
    if (const json* v = field(j_, "guided_choice")) set(choices(*v, "guided_choice"));
    if (const json* v = field(j_, "guided_grammar")) set(text(Kind::kGrammar, *v, "guided_grammar"));
    if (const json* v = field(j_, "regex")) set(text(Kind::kRegex, *v, "regex"));              // SGLang
    if (const json* v = field(j_, "ebnf")) set(text(Kind::kGrammar, *v, "ebnf"));              // SGLang
    if (const json* v = field(j_, "grammar")) set(text(Kind::kGrammar, *v, "grammar"));        // llama.cpp
    if (field(j_, "json_schema")) set(schema({"json_schema"}, "json_schema"));                 // both
    if (const json* v = field(j_, "guided_whitespace_pattern")) whitespace(*v, "guided_whitespace_pattern");
    return std::move(out_);
  }

 private:
  void set(OutputConstraint c) {
    if (out_.kind != Kind::kNone) {
      bad_request(c.param, fmt::format("only one output constraint may be given: '{}' and '{}'", out_.param, c.param));
    }
    out_ = std::move(c);
  }

  // The schema at `path` of the body, re-read in the client's key order: an object, or a JSON
  // string holding one (SGLang's json_schema, vLLM's guided_json may be either).
  OutputConstraint schema(const std::vector<std::string>& path, const std::string& param) {
    const ordered_json whole = ordered_json::parse(body_, nullptr, /*allow_exceptions=*/false);
    const ordered_json* v = &whole;
    for (const auto& key : path) v = &v->at(key);
    ordered_json parsed;
    if (v->is_string()) {
      parsed = ordered_json::parse(v->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) bad_request(param, fmt::format("'{}' is a string that is not valid JSON", param));
      v = &parsed;
    }
    if (!v->is_object() && !v->is_boolean()) {
      bad_request(param, fmt::format("'{}' must be a JSON Schema (an object)", param));
    }
    OutputConstraint c;
    c.kind = Kind::kJsonSchema;
    c.param = param;
    c.text = v->dump();
    return c;
  }

  static OutputConstraint text(Kind kind, const json& v, const std::string& param) {
    OutputConstraint c;
    c.kind = kind;
    c.param = param;
    c.text = string_field(v, param);
    if (c.text.empty()) bad_request(param, fmt::format("'{}' must not be empty", param));
    return c;
  }

  static OutputConstraint choices(const json& v, const std::string& param) {
    if (!v.is_array() || v.empty()) bad_request(param, fmt::format("'{}' must be a non-empty array of strings", param));
    OutputConstraint c;
    c.kind = Kind::kChoice;
    c.param = param;
    for (const auto& s : v) {
      if (!s.is_string()) bad_request(param, fmt::format("'{}' must be a non-empty array of strings", param));
      c.choices.push_back(s.get<std::string>());
    }
    return c;
  }

  void whitespace(const json& v, const std::string& param) {
    const std::string pattern = string_field(v, param);
    if (out_.kind != Kind::kJsonSchema && out_.kind != Kind::kJsonObject) {
      bad_request(param, fmt::format("'{}' applies to a JSON constraint only", param));
    }
    out_.whitespace_pattern = pattern;
  }

  void response_format(const json& v) {
    if (!v.is_object()) bad_request("response_format", "'response_format' must be an object");
    const json* type = field(v, "type");
    const std::string t = type ? string_field(*type, "response_format.type") : "";
    if (t == "text" || t == "json_object") {
      check_keys(v, {"type"}, "response_format.", "");
      if (t == "json_object") set({.kind = Kind::kJsonObject, .param = "response_format"});
      return;
    }
    if (t != "json_schema") {
      bad_request("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    }
    check_keys(v, {"type", "json_schema"}, "response_format.", "");
    const json* js = field(v, "json_schema");
    if (!js || !js->is_object()) {
      bad_request("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
    }
    check_keys(*js, {"name", "description", "schema", "strict"}, "response_format.json_schema.", "");
    if (const json* name = field(*js, "name")) string_field(*name, "response_format.json_schema.name");
    if (const json* d = field(*js, "description")) string_field(*d, "response_format.json_schema.description");
    if (!field(*js, "schema")) {
      bad_request("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
    }
    OutputConstraint c = schema({"response_format", "json_schema", "schema"}, "response_format.json_schema.schema");
    if (const json* strict = field(*js, "strict")) {
      if (!strict->is_boolean()) bad_request("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
      c.strict = strict->get<bool>();
    }
    set(std::move(c));
  }

  void structured_outputs(const json& v) {
    const std::string p = "structured_outputs.";
    if (!v.is_object()) bad_request("structured_outputs", "'structured_outputs' must be an object");
    check_keys(v, {"json", "regex", "choice", "grammar", "json_object", "whitespace_pattern", "disable_any_whitespace",
                   "disable_additional_properties"},
               p, " (Spindle reads json, regex, choice, grammar, json_object, whitespace_pattern, disable_any_whitespace, "
                  "disable_additional_properties)");
    const size_t before = out_.kind == Kind::kNone ? 0 : 1;
    if (field(v, "json")) set(schema({"structured_outputs", "json"}, p + "json"));
    if (const json* x = field(v, "regex")) set(text(Kind::kRegex, *x, p + "regex"));
    if (const json* x = field(v, "choice")) set(choices(*x, p + "choice"));
    if (const json* x = field(v, "grammar")) set(text(Kind::kGrammar, *x, p + "grammar"));
    if (const json* x = field(v, "json_object")) {
      if (!x->is_boolean()) bad_request(p + "json_object", "'structured_outputs.json_object' must be a boolean");
      if (x->get<bool>()) set({.kind = Kind::kJsonObject, .param = p + "json_object"});
    }
    if (before == 0 && out_.kind == Kind::kNone) {
      bad_request("structured_outputs", "'structured_outputs' needs one of json, regex, choice, grammar, json_object");
    }
    if (const json* x = field(v, "whitespace_pattern")) whitespace(*x, p + "whitespace_pattern");
    if (const json* x = field(v, "disable_any_whitespace")) {
      if (!x->is_boolean()) bad_request(p + "disable_any_whitespace", "'structured_outputs.disable_any_whitespace' must be a boolean");
      if (x->get<bool>()) {
        if (field(v, "whitespace_pattern")) {
          bad_request(p + "disable_any_whitespace", "'structured_outputs.disable_any_whitespace' and 'whitespace_pattern' contradict");
        }
        whitespace(json("(?:)"), p + "disable_any_whitespace");  // no byte between JSON tokens
      }
    }
    if (const json* x = field(v, "disable_additional_properties")) {
      if (!x->is_boolean()) bad_request(p + "disable_additional_properties", "'structured_outputs.disable_additional_properties' must be a boolean");
      if (out_.kind != Kind::kJsonSchema) {
        bad_request(p + "disable_additional_properties", "'structured_outputs.disable_additional_properties' applies to 'json' only");
      }
      out_.strict = x->get<bool>();
    }
  }

  const json& j_;
  const std::string& body_;
  OutputConstraint out_;
};

grammar::Grammar grammar_of(const OutputConstraint& c) {
  grammar::JsonGrammarOptions json_options;
  json_options.strict = c.strict;
  json_options.whitespace_pattern = c.whitespace_pattern;
  switch (c.kind) {
    case Kind::kJsonSchema: return grammar::grammar_from_json_schema(c.text, json_options);
    case Kind::kJsonObject: return grammar::grammar_json_object(json_options);
    case Kind::kRegex: return grammar::grammar_from_regex(c.text);
    case Kind::kGrammar: return grammar::grammar_from_gbnf(c.text);
    case Kind::kChoice: return grammar::grammar_from_choices(c.choices);
    case Kind::kNone: break;
  }
  SPINDLE_CHECK(false, "no output constraint to compile");
  return {};
}

// A JSON document after up to kMaxLeadingSpace whitespace bytes (content after a reasoning
// section starts "\n\n" in Qwen3's and DeepSeek-R1's outputs; JSON parsers skip it).
constexpr int kMaxLeadingSpace = 4;

std::shared_ptr<const grammar::CompiledGrammar> compile_now(const OutputConstraint& c) {
  grammar::Grammar g = grammar_of(c);
  const bool json_kind = c.kind == Kind::kJsonSchema || c.kind == Kind::kJsonObject;
  if (c.leading_space && json_kind) {
    grammar::Grammar outer;
    const int32_t document = outer.embed(g);
    const int32_t space = outer.lexeme(grammar::re_repeat(
        grammar::re_chars({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}}), 1, kMaxLeadingSpace));
    outer.set_start(outer.choice({{document}, {space, document}}, "spaced"));
    g = std::move(outer);
  }
  return grammar::CompiledGrammar::compile(g);
}

// The cache key: kind, options and the canonical text (a schema's compact dump in key order).
std::string cache_key(const OutputConstraint& c) {
  std::string key = fmt::format("{}\x1f{}{}\x1f{}\x1f", static_cast<int>(c.kind), c.strict ? 1 : 0, c.leading_space ? 1 : 0,
                                c.whitespace_pattern);
  if (c.kind == Kind::kChoice) {
    key += json(c.choices).dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    key += c.text;
  }
  return key;
}

class GrammarCache {
 public:
  static constexpr size_t kCapacity = 256;

  std::shared_ptr<const grammar::CompiledGrammar> find(const std::string& key) {
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    ++stats_.hits;
    return it->second->second;
  }
  void put(const std::string& key, std::shared_ptr<const grammar::CompiledGrammar> g) {
    std::lock_guard lock(mutex_);
    ++stats_.compiled;
    if (index_.count(key) != 0) return;  // compiled twice at once: the first stays
    lru_.emplace_front(key, std::move(g));
    index_[key] = lru_.begin();
    if (lru_.size() > kCapacity) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  ConstraintCacheStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  std::mutex mutex_;
  using Entry = std::pair<std::string, std::shared_ptr<const grammar::CompiledGrammar>>;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  ConstraintCacheStats stats_;
};

GrammarCache& cache() {
  static GrammarCache c;
  return c;
}

}  // namespace

OutputConstraint parse_output_constraint(const json& j, const std::string& body) {
  return ConstraintReader(j, body).read();
}

std::shared_ptr<const grammar::CompiledGrammar> compile_output_constraint(const OutputConstraint& c) {
  const std::string key = cache_key(c);
  if (auto hit = cache().find(key)) return hit;
  std::shared_ptr<const grammar::CompiledGrammar> compiled;
  try {
    compiled = compile_now(c);
  } catch (const Error& e) {
    bad_request(c.param, fmt::format("'{}' cannot be used: {}", c.param, e.message()));
  } catch (const std::exception& e) {  // e.g. a limit of the standard library's containers
    bad_request(c.param, fmt::format("'{}' cannot be used: {}", c.param, e.what()));
  }
  cache().put(key, compiled);
  return compiled;
}

ConstraintCacheStats constraint_cache_stats() { return cache().stats(); }

}  // namespace spindle::server
