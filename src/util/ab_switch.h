// A/B switches for benchmarks: a feature that the environment variable `name` set to "0" turns
// off (any other value, or none, leaves it on). Callers read it once (a function-local static).
#pragma once

#include <cstdlib>
#include <string_view>

namespace spindle {

inline bool ab_switch_on(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr || std::string_view(value) != "0";
}

// An opt-in feature (measured slower, kept for the next attempt): on only when `name` is "1".
inline bool ab_switch_opted_in(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string_view(value) == "1";
}

}  // namespace spindle
