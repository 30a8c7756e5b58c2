// The spindle binary that tests run as a child: $SPINDLE_BINARY when set (e.g. on another host
// that runs carried test binaries), else the one this build produced.
#pragma once

#include <cstdlib>
#include <string>

namespace spindle::testing {

inline std::string spindle_binary() {
  const char* env = std::getenv("SPINDLE_BINARY");
  return env && *env ? env : SPINDLE_BINARY;
}

}  // namespace spindle::testing
