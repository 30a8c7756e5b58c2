// The small front ends: a regular expression (the whole output matches it) and a choice list
// (the output is exactly one of the strings).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace spindle::grammar {

// The whole output matches the ECMA-262 pattern (vLLM guided_regex, SGLang regex).
Grammar grammar_from_regex(std::string_view pattern);
// The output is one of the strings (vLLM guided_choice); at least one, each valid UTF-8.
Grammar grammar_from_choices(const std::vector<std::string>& choices);

}  // namespace spindle::grammar
