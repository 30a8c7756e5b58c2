// Python's str operations over UTF-8 text, as templates see them: a string is a sequence of code
// points. Bytes that are not valid UTF-8 decode to U+DC80..U+DCFF (Python's surrogateescape) and
// encode back to the same byte, so no operation changes bytes it does not touch.
// Case mappings (upper, lower, title, capitalize) cover ASCII, Latin-1, Latin Extended-A, Greek
// and Cyrillic; other scripts are left as they are.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::jinja::py {

std::u32string decode(std::string_view text);
std::string encode(std::u32string_view text);
void append_code_point(std::string& out, char32_t c);
// Number of code points.
size_t length(std::string_view text);

// Python's str.isspace() for one code point.
bool is_space(char32_t c);

// str.strip / lstrip / rstrip; chars = nullopt strips whitespace.
std::string strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) / rsplit; sep = nullopt splits on runs of whitespace.
std::vector<std::string> split(std::string_view text, const std::optional<std::string>& sep, int64_t maxsplit,
                               bool from_right);
std::vector<std::string> splitlines(std::string_view text, bool keepends);
// str.replace(old, new, count); count < 0 replaces all. An empty `old` inserts between code points.
std::string replace(std::string_view text, std::string_view old_text, std::string_view new_text, int64_t count);
// str.count(sub) (non-overlapping) / str.find(sub) (code point index or -1).
int64_t count(std::string_view text, std::string_view sub);
int64_t find(std::string_view text, std::string_view sub, bool from_right);
std::string upper(std::string_view text);
char32_t upper_char(char32_t c);
char32_t lower_char(char32_t c);
std::string lower(std::string_view text);
std::string capitalize(std::string_view text);
// Python's str.title(): a letter after a non-letter is upper-cased, other letters lower-cased.
std::string title(std::string_view text);
// Python's repr() of a str.
std::string repr(std::string_view text);

}  // namespace spindle::jinja::py
