// Stop strings over streamed text. Text that could still become the start of a stop string is
// held back, so a streaming client never receives part of a stop string.
#pragma once

#include <string>
#include <vector>

namespace spindle::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;     // text that is now safe to send
    bool stopped = false; // a stop string matched; emit ends right before it
  };
  // Appends new text; returns what may be emitted now.
  Result feed(const std::string& text);
  // At the end of generation (no stop matched): whatever was held back.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  size_t max_stop_ = 0;
};

}  // namespace spindle::engine
