#include "jinja/pystring.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/utf8.h"

namespace spindle::jinja::py {
namespace {

bool is_ascii_letter(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Simple case mappings of ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (the letters
// templates' text meets); other code points map to themselves.
char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 0x20;
  if (c == 0xff) return 0x178;
  if (c == 0xb5) return 0x39c;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177)) return c & ~char32_t{1};
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c % 2 == 0) ? c - 1 : c;
  if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 0x20;
  if (c == 0x3c2) return 0x3a3;
  if (c >= 0x430 && c <= 0x44f) return c - 0x20;
  if (c >= 0x450 && c <= 0x45f) return c - 0x50;
  return c;
}
char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 0x20;
  if (c == 0x178) return 0xff;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177)) return c | 1;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c % 2 == 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42f) return c + 0x20;
  if (c >= 0x400 && c <= 0x40f) return c + 0x50;
  return c;
}
bool is_cased(char32_t c) { return to_upper(c) != c || to_lower(c) != c || c == 0xdf; }

std::string map_case(std::string_view text, bool upper_case) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : decode(text)) {
    if (upper_case && c == 0xdf) out += "SS";  // Python: "ß".upper() == "SS"
    else append_code_point(out, upper_case ? to_upper(c) : to_lower(c));
  }
  return out;
}

// Python's str.isprintable() for one code point, for the categories templates meet: controls,
// the C1 range, the non-space separators and the common format characters are not printable.
bool is_printable(char32_t c) {
  if (c < 0x20 || c == 0x7f) return false;
  if (c >= 0x80 && c <= 0xa0) return false;
  if (c == 0xad || c == 0x1680 || c == 0x3000 || c == 0xfeff) return false;
  if (c >= 0x2000 && c <= 0x200f) return false;
  if (c >= 0x2028 && c <= 0x202f) return false;
  if (c >= 0x205f && c <= 0x206f) return false;
  if (c >= 0xd800 && c <= 0xdfff) return false;
  if (c >= 0xfff9 && c <= 0xfffb) return false;
  return true;
}

bool contains(std::u32string_view set, char32_t c) { return set.find(c) != std::u32string_view::npos; }

}  // namespace

std::u32string decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    int n = 0;
    char32_t c = 0;
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    } else if ((b0 & 0xe0) == 0xc0) {
      n = 2, c = b0 & 0x1f;
    } else if ((b0 & 0xf0) == 0xe0) {
      n = 3, c = b0 & 0x0f;
    } else if ((b0 & 0xf8) == 0xf0) {
      n = 4, c = b0 & 0x07;
    }
    bool ok = n > 0 && i + n <= text.size();
    for (int k = 1; ok && k < n; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      ok = (b & 0xc0) == 0x80;
      c = (c << 6) | (b & 0x3f);
    }
    if (ok) {
      const char32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
      ok = c >= min && c <= 0x10ffff && !(c >= 0xd800 && c <= 0xdfff);
    }
    if (ok) {
      out.push_back(c);
      i += n;
    } else {
      out.push_back(0xdc00 + b0);  // surrogateescape: the byte itself
      ++i;
    }
  }
  return out;
}

void append_code_point(std::string& out, char32_t c) {
  if (c >= 0xdc80 && c <= 0xdcff) {
    out.push_back(static_cast<char>(c - 0xdc00));  // surrogateescape: the byte itself
  } else {
    append_utf8(out, c);
  }
}

std::string encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_code_point(out, c);
  return out;
}

size_t length(std::string_view text) {
  bool ascii = std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  return ascii ? text.size() : decode(text).size();
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string s = decode(text);
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strippable = [&](char32_t c) { return chars ? contains(set, c) : is_space(c); };
  size_t begin = 0, end = s.size();
  if (left)
    while (begin < end && strippable(s[begin])) ++begin;
  if (right)
    while (end > begin && strippable(s[end - 1])) --end;
  return encode(std::u32string_view(s).substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view text, const std::optional<std::string>& sep, int64_t maxsplit,
                               bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    std::string_view rest = text;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t pos = from_right ? rest.rfind(*sep) : rest.find(*sep);
      if (pos == std::string_view::npos) break;
      if (from_right) {
        parts.emplace_back(rest.substr(pos + sep->size()));
        rest = rest.substr(0, pos);
      } else {
        parts.emplace_back(rest.substr(0, pos));
        rest = rest.substr(pos + sep->size());
      }
    }
    parts.emplace_back(rest);
    if (from_right) std::reverse(parts.begin(), parts.end());
    return parts;
  }
  // Runs of whitespace; leading/trailing whitespace gives no empty parts.
  std::u32string s = decode(text);
  if (from_right) std::reverse(s.begin(), s.end());
  size_t i = 0;
  while (true) {
    while (i < s.size() && is_space(s[i])) ++i;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      size_t end = s.size();
      while (end > i && is_space(s[end - 1])) --end;
      parts.push_back(encode(std::u32string_view(s).substr(i, end - i)));
      break;
    }
    size_t j = i;
    while (j < s.size() && !is_space(s[j])) ++j;
    parts.push_back(encode(std::u32string_view(s).substr(i, j - i)));
    i = j;
  }
  if (from_right) {
    for (auto& p : parts) {
      std::u32string d = decode(p);
      std::reverse(d.begin(), d.end());
      p = encode(d);
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> splitlines(std::string_view text, bool keepends) {
  const std::u32string s = decode(text);
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    const char32_t c = s[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    if (c == '\r' && end < s.size() && s[end] == '\n') ++end;
    lines.push_back(encode(std::u32string_view(s).substr(start, (keepends ? end : i) - start)));
    start = i = end;
  }
  if (start < s.size()) lines.push_back(encode(std::u32string_view(s).substr(start)));
  return lines;
}

std::string replace(std::string_view text, std::string_view old_text, std::string_view new_text, int64_t count) {
  std::string out;
  if (old_text.empty()) {
    const std::u32string s = decode(text);
    int64_t done = 0;
    for (size_t i = 0; i <= s.size(); ++i) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      if (i < s.size()) append_code_point(out, s[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = text.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(new_text);
    pos = hit + old_text.size();
    ++done;
  }
  out.append(text.substr(pos));
  return out;
}

int64_t count(std::string_view text, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(text)) + 1;
  int64_t n = 0;
  for (size_t pos = text.find(sub); pos != std::string_view::npos; pos = text.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t find(std::string_view text, std::string_view sub, bool from_right) {
  const size_t pos = from_right ? text.rfind(sub) : text.find(sub);
  if (pos == std::string_view::npos) return -1;
  return static_cast<int64_t>(length(text.substr(0, pos)));
}

std::string upper(std::string_view text) { return map_case(text, true); }
std::string lower(std::string_view text) { return map_case(text, false); }
char32_t upper_char(char32_t c) { return to_upper(c); }
char32_t lower_char(char32_t c) { return to_lower(c); }

std::string capitalize(std::string_view text) {
  std::u32string s = decode(text);
  for (size_t i = 0; i < s.size(); ++i) s[i] = i == 0 ? to_upper(s[i]) : to_lower(s[i]);
  return encode(s);
}

std::string title(std::string_view text) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : decode(text)) {
    const bool cased = is_cased(c) || is_ascii_letter(c);
    append_code_point(out, cased ? (prev_cased ? to_lower(c) : to_upper(c)) : c);
    prev_cased = cased;
  }
  return out;
}

std::string repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode(text)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0xdc80 && c <= 0xdcff) {
      out += fmt::format("\\udc{:02x}", static_cast<unsigned>(c - 0xdc00));
    } else if (!is_printable(c)) {
      if (c < 0x100) out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
      else out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      append_code_point(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace spindle::jinja::py
