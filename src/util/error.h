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

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::source_location where);
  // The message without the location suffix.
  const std::string& message() const { return message_; }
  const std::source_location& where() const { return where_; }

 private:
  std::string message_;
  std::source_location where_;
};

namespace detail {
[[noreturn]] void throw_error(std::string message, std::source_location where);
}  // namespace detail

}  // namespace spindle

#define SPINDLE_FAIL(...) \
  ::spindle::detail::throw_error(::fmt::format(__VA_ARGS__), std::source_location::current())

#define SPINDLE_CHECK(cond, ...)                   \
  do {                                             \
    if (!(cond)) [[unlikely]] {                    \
      SPINDLE_FAIL(__VA_ARGS__);                   \
    }                                              \
  } while (0)
