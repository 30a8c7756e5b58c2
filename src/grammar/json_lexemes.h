// Regular expressions for JSON tokens: strings (optionally of bounded length or matching a
// pattern or format), integers and numbers in ranges, whitespace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/regex_ast.h"

namespace spindle::grammar {

// One character of a JSON string's text (a literal or an escape), decoding to any code point.
RegexPtr json_string_char();
// "..." whose decoded text has min..max code points (max -1: unbounded).
RegexPtr json_string(int min_length, int max_length);
// The JSON string texts whose decoded value matches `value` (a regex over code points):
// '"', '\' and control characters appear as their escapes; the quotes included.
RegexPtr json_quoted(const RegexPtr& value);
// The canonical JSON texts (literal characters, short escapes, \u00XX only for other control
// characters; quotes included) of every string NOT in `names`: object keys that must differ from
// the declared property names. One encoding per string, so no declared name slips through as
// an escaped spelling.
RegexPtr json_key_not_in(const std::vector<std::string>& names);
// Decoded-value regex for a JSON Schema format; nullopt for formats not known here.
std::optional<RegexPtr> json_format_regex(std::string_view format);

// Decimal integers (JSON syntax) in [lo, hi]; nullopt bounds are unbounded.
RegexPtr json_integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);
// JSON numbers v with lo <= v <= hi (or < / > when exclusive), for integral bounds; no exponent
// when a bound is given.
RegexPtr json_number_range(std::optional<int64_t> lo, bool lo_exclusive, std::optional<int64_t> hi,
                           bool hi_exclusive);
RegexPtr json_number();

}  // namespace spindle::grammar
