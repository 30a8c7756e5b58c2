// UTF-8 encoding of one code point, the one encoder of the tokenizer, Jinja and grammar layers.
#pragma once

#include <cstdint>
#include <string>

namespace spindle {

// Writes the UTF-8 encoding of cp (at most U+10FFFF) to out[0..n) and returns n (1 to 4): one
// byte below U+0080, two below U+0800, three below U+10000, else four (RFC 3629's layout).
// Surrogates are encoded like any other code point: callers that must refuse them check first.
inline int encode_utf8(char32_t cp, uint8_t out[4]) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// Appends the UTF-8 encoding of cp (as encode_utf8).
inline void append_utf8(std::string& out, char32_t cp) {
  uint8_t bytes[4];
  const int n = encode_utf8(cp, bytes);
  out.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
}

}  // namespace spindle
