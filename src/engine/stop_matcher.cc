#include "engine/stop_matcher.h"

#include <algorithm>

namespace spindle::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const auto& s : stops_) max_stop_ = std::max(max_stop_, s.size());
}

StopMatcher::Result StopMatcher::feed(const std::string& text) {
  Result r;
  pending_ += text;
  if (stops_.empty()) {
    r.emit = std::move(pending_);
    pending_.clear();
    return r;
  }
  // The earliest full match wins.
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    r.emit = pending_.substr(0, first);
    r.stopped = true;
    pending_.clear();
    return r;
  }
  // Hold back the longest suffix that is a prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n) {
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  r.emit = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return r;
}

std::string StopMatcher::flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace spindle::engine
