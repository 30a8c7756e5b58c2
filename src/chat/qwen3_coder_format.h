// Qwen3-Coder's XML tool calls: how a parameter's value is written, read back and constrained.
//
//   <tool_call>\n<function=NAME>\n
//   <parameter=P>\nVALUE\n</parameter>\n        (per parameter)
//   </function>\n</tool_call>
//
// A text parameter (its schema is a string schema: "type": "string", or no type and an enum /
// const of strings only) has its VALUE as raw text, as Qwen3-Coder's template writes a string
// argument; every other parameter's VALUE is JSON text (numbers, booleans, null, objects and
// arrays: the template's tojson; booleans as JSON's true / false). The parser reads a text
// parameter's value as written and any other value as JSON (as text when it is not JSON), so a
// text "42" stays a string.
//
// The grammar of the parameters (add_xml_parameters), per declared property in declared order,
// required ones always, optional ones at most once; no undeclared parameter:
//   text VALUE, as the string schema allows it: an enum / const is one of its strings; a pattern
//     or a known format is its regular expression over the text; otherwise minLength..maxLength
//     characters: any text without "</parameter>" when no maxLength is given (or maxLength < 12,
//     too short to hold it), else characters other than '<' (a bounded count cannot be joined
//     with the exclusion in one expression; what it gives up is text a model rarely needs there)
//   JSON VALUE, the property's schema through grammar/json_schema.h (the root's $defs /
//     definitions are carried over, so local $refs resolve).
// The schema itself must be an object schema: type "object" (or none), properties, required,
// additionalProperties (undeclared parameters are never written, which any setting allows) and
// annotations; any other keyword is an error naming it.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace spindle::chat {

// Whether a parameter with this schema is written as raw text (see above).
bool is_text_parameter(const nlohmann::ordered_json& schema);

// Function name -> its text parameters, from the request's tools
// ([{type: "function", function: {name, parameters?}}]); tools that are not so shaped are skipped.
using TextParameters = std::map<std::string, std::set<std::string>>;
TextParameters text_parameters(const nlohmann::ordered_json& tools);

// A nonterminal deriving the parameter lines of one call of `function` (the request's
// tools[index].function). Throws spindle::Error "tools[index].function.parameters: ..." for a
// schema the format cannot write.
int32_t add_xml_parameters(grammar::Grammar& g, const nlohmann::ordered_json& function, size_t index,
                           const grammar::JsonGrammarOptions& options);

}  // namespace spindle::chat
