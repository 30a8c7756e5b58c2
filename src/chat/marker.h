// Finding a marker (`<think>`, `<tool_call>`) in text that arrives in pieces: a piece may end with
// the first bytes of a marker whose rest comes in the next piece, so those bytes are held back
// until it is known whether they begin the marker.
#pragma once

#include <string_view>

namespace spindle::chat {

// The length of the longest suffix of `text` that is a proper prefix of `marker` (0 when none):
// the bytes to hold back while the marker may still complete.
inline size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  const size_t most = std::min(text.size(), marker.size() - 1);
  for (size_t n = most; n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// ASCII whitespace (what Python's str.strip() removes from model text in practice).
inline bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

inline std::string_view strip_leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return s.substr(i);
}

inline bool all_space(std::string_view s) { return strip_leading_space(s).empty(); }

}  // namespace spindle::chat
