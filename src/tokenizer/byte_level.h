// GPT-2's reversible byte <-> printable code point mapping used by byte-level BPE.
// Printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves; the other 68
// bytes map, in byte order, to U+0100, U+0101, ...
#pragma once

#include <string>
#include <string_view>

namespace spindle::tokenizer {

// The code point byte b maps to.
char32_t byte_to_code_point(unsigned char b);

// Appends the byte-level form of raw bytes (each byte becomes the UTF-8 of its code point).
void byte_level_encode(std::string_view bytes, std::string& out);

// Appends the raw bytes of a byte-level token (valid UTF-8). Code points outside the
// mapping (e.g. in added tokens) are appended as their own UTF-8.
void byte_level_decode(std::string_view token, std::string& out);

}  // namespace spindle::tokenizer
