// The message of the spindle::Error a call throws: what tests of bad input compare.
#pragma once

#include <string>

#include "util/error.h"

namespace spindle::testing {

// The what() of the spindle::Error that f() throws, "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace spindle::testing
