// Structured output on the wire: the request fields that constrain the output (OpenAI's
// response_format, vLLM's structured_outputs and its older guided_*, SGLang's regex / ebnf /
// json_schema, llama.cpp's grammar / json_schema) read into one OutputConstraint, and its grammar
// compiled (grammar/), cached by canonical text.
//
// At most one constraint per request: two constraint fields are a 400 naming the second. A
// schema, regex or grammar that does not compile is a 400 naming the field, with the grammar
// layer's reason (a JSON pointer for a schema keyword). Compilation runs on the caller's thread
// (the HTTP work pool, before the request is queued; never the engine thread), bounded by the
// grammar layer's limits (productions, automaton states, seconds).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace spindle::grammar {
class CompiledGrammar;
}

namespace spindle::server {

struct OutputConstraint {
  enum class Kind : uint8_t { kNone, kJsonSchema, kJsonObject, kRegex, kGrammar, kChoice };
  Kind kind = Kind::kNone;
  std::string param;  // the field it came from, as a 400 names it ("response_format.json_schema.schema")
  // kJsonSchema: the schema as compact JSON text, in the client's key order (property order is the
  // order of the generated keys); kRegex: the ECMA-262 pattern (the whole output matches it);
  // kGrammar: GBNF (llama.cpp's syntax; vLLM's and SGLang's EBNF in that syntax).
  std::string text;
  std::vector<std::string> choices;  // kChoice: the output is exactly one of them
  // JSON: OpenAI's strict (an unspecified additionalProperties means false), also vLLM's
  // disable_additional_properties.
  bool strict = false;
  // JSON: a regex for the whitespace between tokens ("" = compact; vLLM's disable_any_whitespace
  // is "(?:)", nothing at all).
  std::string whitespace_pattern;
  // JSON: up to 4 whitespace bytes may precede the document (set by the server for content that
  // follows a reasoning section; not a request field).
  bool leading_space = false;
};

// The constraint fields of a request body. `j` is the parsed body, `body` its text (a schema is
// read again from it with the client's key order, which `j` does not keep). Throws ApiError 400
// naming the field for a malformed value, an unsupported option or a second constraint.
OutputConstraint parse_output_constraint(const nlohmann::json& j, const std::string& body);

// The compiled grammar of c (kind != kNone), from the process-wide cache (the 256 most recently
// used, keyed by kind, options and canonical text) or compiled now. Throws ApiError 400 naming
// c.param when it does not compile. Thread-safe.
std::shared_ptr<const grammar::CompiledGrammar> compile_output_constraint(const OutputConstraint& c);

// Compilations done and cache hits since start (tests).
struct ConstraintCacheStats {
  uint64_t compiled = 0;
  uint64_t hits = 0;
};
ConstraintCacheStats constraint_cache_stats();

}  // namespace spindle::server
