// UTF-8 helpers: validation, code point iteration, and a streaming assembler that never
// emits a broken sequence.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "util/utf8.h"

namespace spindle::tokenizer {

inline constexpr size_t kValidUtf8 = std::string_view::npos;

// Byte offset of the first byte that does not start a well-formed UTF-8 sequence
// (overlongs, surrogates and code points above U+10FFFF are ill-formed), or kValidUtf8.
size_t find_invalid_utf8(std::string_view text);

// Throws spindle::Error "<what> is not valid UTF-8 at byte N" when text is ill-formed.
void check_utf8(std::string_view text, std::string_view what = "prompt");

// Decodes the code point starting at text[pos] (text must be valid UTF-8) and advances pos.
char32_t next_code_point(std::string_view text, size_t& pos);

// Turns a byte stream into valid UTF-8. Complete sequences pass through; an ill-formed
// sequence becomes one U+FFFD per maximal subpart (as WHATWG / Rust from_utf8_lossy);
// a sequence that may still be completed by later bytes is held back until it is.
class Utf8Assembler {
 public:
  // Appends the new bytes and moves everything that is settled into out.
  void push(std::string_view bytes, std::string& out);
  // Settles the held-back tail (an incomplete sequence becomes U+FFFD).
  void finish(std::string& out);
  bool has_pending() const { return !pending_.empty(); }

 private:
  void drain(std::string& out, bool final);

  std::string pending_;
};

// Lossy conversion of a whole byte string (Utf8Assembler push + finish).
std::string to_valid_utf8(std::string_view bytes);

}  // namespace spindle::tokenizer
