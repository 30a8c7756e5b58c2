// JSON Schema -> Grammar.
//
// Supported: type (and lists of types), properties / required / additionalProperties (in the
// declared property order), prefixItems / items / minItems / maxItems, enum / const, anyOf /
// oneOf (as alternatives: oneOf's exclusivity is not enforced), allOf (merged where the
// subschemas combine), $ref / $defs / definitions (local JSON pointers, recursion included),
// pattern, minLength / maxLength, integer and number bounds (integral bounds for numbers),
// formats date-time, date, time, duration, email, hostname, ipv4, ipv6, uri, uuid.
// Annotations (title, description, examples, ...) are ignored; any other keyword is an error
// naming it by JSON pointer (keywords outside the vocabulary are annotations). Declared properties
// come in the declared order; extra keys (additionalProperties; unspecified = allowed unless
// options.strict, OpenAI's strict mode) may come anywhere between them and never spell a
// declared name.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace spindle::grammar {

struct JsonGrammarOptions {
  enum class Whitespace {
    kCompact,   // between two JSON tokens: nothing, one space, or one newline plus indentation
    kFlexible,  // any run of space, tab, CR, LF
  };
  Whitespace whitespace = Whitespace::kCompact;
  std::string whitespace_pattern;  // a regex (vLLM's whitespace_pattern); overrides whitespace
  bool strict = false;
  // Extra keys may come before and between the declared properties (MaskBench's valid instances
  // put e.g. "$schema" first); false: only after the last declared property.
  bool extra_keys_anywhere = true;
  size_t max_productions = 200'000;
  double max_seconds = 2.0;
};

// schema_text: the schema as JSON text (parsed with its key order kept).
// Throws spindle::Error: "json_schema: <what> at <JSON pointer>".
Grammar grammar_from_json_schema(std::string_view schema_text, const JsonGrammarOptions& options = {});
Grammar grammar_from_json_schema_value(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options = {});
// Any JSON object at the top level (response_format json_object).
Grammar grammar_json_object(const JsonGrammarOptions& options = {});

}  // namespace spindle::grammar
