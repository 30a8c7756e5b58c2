// Errors: one exception type, one check macro.
//
//   SPINDLE_CHECK(cond, "format {}", args...)  throws spindle::Error when cond is false.
//   SPINDLE_FAIL("format {}", args...)          always throws.
//
// The message comes first and says what was wrong (and, for user mistakes, what to do);
// the source location (file:line) is appended in brackets for developers.
#pragma once

#include <fmt/format.h>

#include <source_location>
#include <stdexcept>
#include <string>

namespace spindle {

// SourceLocation where the standard library provides it; clang before 15 cannot compile
// libstdc++'s (no __builtin_source_location), so there a two-field stand-in built from
// __builtin_FILE / __builtin_LINE keeps the same interface.
#if defined(__cpp_lib_source_location)
using SourceLocation = std::source_location;
#define SPINDLE_CURRENT_LOCATION() std::source_location::current()
#else
struct SourceLocation {
  const char* file_ = "";
  unsigned line_ = 0;
  constexpr const char* file_name() const { return file_; }
  constexpr unsigned line() const { return line_; }
};
#define SPINDLE_CURRENT_LOCATION() (::spindle::SourceLocation{__builtin_FILE(), __builtin_LINE()})
#endif

class Error : public std::runtime_error {
 public:
  Error(std::string message, SourceLocation where);
  // The message without the location suffix.
  const std::string& message() const { return message_; }
  const SourceLocation& where() const { return where_; }

 private:
  std::string message_;
  SourceLocation where_;
};

namespace detail {
[[noreturn]] void throw_error(std::string message, SourceLocation where);
}  // namespace detail

}  // namespace spindle

#define SPINDLE_FAIL(...) \
  ::spindle::detail::throw_error(::fmt::format(__VA_ARGS__), SPINDLE_CURRENT_LOCATION())

#define SPINDLE_CHECK(cond, ...)                   \
  do {                                             \
    if (!(cond)) [[unlikely]] {                    \
      SPINDLE_FAIL(__VA_ARGS__);                   \
    }                                              \
  } while (0)
