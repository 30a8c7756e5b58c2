// Python's arithmetic on template numbers, and slice indices.
#pragma once

#include "jinja/value.h"

#include <cstdint>
#include <string>
#include <vector>

namespace spindle::jinja {

// a op b for numbers (int, float, bool) with op in + - * / // % **, as Python computes it: / is
// always a float, // and % floor, int ** non-negative int stays an int. Integer overflow (Python's
// ints do not overflow; these are 64-bit) and division by zero are errors.
Value arithmetic(const std::string& op, const Value& a, const Value& b);

// Python's slice(start, stop, step).indices(length): the selected indices in order. start, stop,
// step are ints or None; a zero step is an error.
std::vector<int64_t> slice_indices(int64_t length, const Value& start, const Value& stop, const Value& step);

}  // namespace spindle::jinja
