// A compiled PCRE2 pattern (UTF + UCP, JIT when available) used by pre-tokenizer splits.
// Thread-safe: match data is created per call.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::tokenizer {

struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
  bool is_match = false;
};

class Regex {
 public:
  // Throws spindle::Error naming the pattern and PCRE2's message when it does not compile.
  // literal: the pattern is a plain string, not a regular expression.
  explicit Regex(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Cuts text (valid UTF-8) into consecutive non-empty spans covering all of it: every
  // match, and every gap between matches, in order. Empty matches are ignored.
  std::vector<TextSpan> partition(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spindle::tokenizer
