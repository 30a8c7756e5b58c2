// ECMA-262 regular expressions, the subset JSON Schema's `pattern` uses: literals, '.', classes
// ([...], [^...], ranges, \d \D \w \W \s \S), escapes (\n \r \t \f \v \0 \cX \xHH \uHHHH
// \u{...}, identity escapes), groups ((...), (?:...), (?<name>...)), alternation, quantifiers
// (* + ? {n} {n,} {n,m}, lazy forms match the same language) and the anchors ^ and $ at the
// ends of the top-level alternatives. Lookaround, backreferences and word boundaries are an
// error naming the construct and its offset.
#pragma once

#include <string_view>

#include "grammar/regex_ast.h"

namespace spindle::grammar {

enum class RegexMode {
  kFullMatch,  // the whole string matches (vLLM's guided_regex); ^ and $ change nothing
  kSearch,     // JSON Schema's pattern: matches anywhere unless anchored by ^ / $
};

// Throws spindle::Error "regex: <what> at offset N" for syntax errors and unsupported constructs.
RegexPtr parse_regex(std::string_view pattern, RegexMode mode);

// Code point sets of the class escapes (used by other front ends too).
std::vector<CodeRange> regex_digit_class();
std::vector<CodeRange> regex_word_class();
std::vector<CodeRange> regex_space_class();

}  // namespace spindle::grammar
