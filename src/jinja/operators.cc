#include "jinja/operators.h"

#include "jinja/template_error.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace spindle::jinja {
namespace {

// a op b for op in + - *, overflow an error (Python's ints do not overflow; Spindle's are 64-bit).
int64_t checked(char op, int64_t a, int64_t b) {
  int64_t r = 0;
  const bool overflow = op == '+'   ? __builtin_add_overflow(a, b, &r)
                        : op == '-' ? __builtin_sub_overflow(a, b, &r)
                                    : __builtin_mul_overflow(a, b, &r);
  JINJA_CHECK(!overflow, "integer overflow (Spindle's template integers are 64-bit)");
  return r;
}

// Python's int ** non-negative int, overflow an error.
int64_t int_pow(int64_t base, int64_t exp) {
  if (base == 0) return exp == 0 ? 1 : 0;
  if (base == 1) return 1;
  if (base == -1) return exp % 2 == 0 ? 1 : -1;
  int64_t result = 1;  // |base| >= 2: overflow comes within 63 steps
  for (int64_t k = 0; k < exp; ++k)
    JINJA_CHECK(!__builtin_mul_overflow(result, base, &result), "integer overflow in **");
  return result;
}

int64_t floor_div(int64_t a, int64_t b) {
  JINJA_CHECK(b != 0, "integer division or modulo by zero");
  JINJA_CHECK(!(a == INT64_MIN && b == -1), "integer overflow");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

std::vector<int64_t> slice_indices(int64_t length, const Value& start, const Value& stop, const Value& step) {
  auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    JINJA_CHECK(v.is_int() || v.is_bool(), "slice {} must be an integer or None, not {}", what, type_name(v));
    return v.int_value();
  };
  const int64_t st = as_index(step, "step").value_or(1);
  JINJA_CHECK(st != 0, "slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += length;
    if (st > 0) return std::clamp<int64_t>(x, 0, length);
    return std::clamp<int64_t>(x, -1, length - 1);
  };
  const int64_t b = clamp(as_index(start, "start"), st > 0 ? 0 : length - 1);
  const int64_t e = clamp(as_index(stop, "stop"), st > 0 ? length : -1);
  std::vector<int64_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(i);
  return out;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  const char c0 = op[0];
  const bool floats = a.is_float() || b.is_float();
  if (op == "/") {
    JINJA_CHECK(b.number_value() != 0.0, "division by zero");
    return Value(a.number_value() / b.number_value());
  }
  if (op == "**") {
    if (!floats && b.int_value() >= 0) return Value(int_pow(a.int_value(), b.int_value()));
    return Value(std::pow(a.number_value(), b.number_value()));
  }
  if (floats) {
    const double x = a.number_value(), y = b.number_value();
    switch (c0) {
      case '+': return Value(x + y);
      case '-': return Value(x - y);
      case '*': return Value(x * y);
      case '%': {
        JINJA_CHECK(y != 0.0, "float modulo");
        double m = std::fmod(x, y);
        if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
        return Value(m);
      }
      default: {  // "//"
        JINJA_CHECK(y != 0.0, "float floor division by zero");
        return Value(std::floor(x / y));
      }
    }
  }
  const int64_t x = a.int_value(), y = b.int_value();
  switch (c0) {
    case '+':
    case '-':
    case '*': return Value(checked(c0, x, y));
    case '%': {
      const int64_t q = floor_div(x, y);
      return Value(x - q * y);
    }
    default: return Value(floor_div(x, y));
  }
}

}  // namespace spindle::jinja
