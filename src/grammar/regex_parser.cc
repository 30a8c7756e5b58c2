#include "grammar/regex_parser.h"

#include "util/error.h"

namespace spindle::grammar {
namespace {

class RegexParser {
 public:
  RegexParser(std::string_view p, RegexMode mode) : p_(p), mode_(mode) {}

  RegexPtr parse() {
    std::vector<RegexPtr> alts;
    do {
      alts.push_back(top_sequence());
    } while (eat('|'));
    if (pos_ < p_.size()) fail("unmatched ')'");
    return re_alt(std::move(alts));
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    SPINDLE_FAIL("regex: {} at offset {} in /{}/", what, pos_, p_);
  }
  bool eat(char c) {
    if (pos_ < p_.size() && p_[pos_] == c) return ++pos_, true;
    return false;
  }
  char peek() const { return pos_ < p_.size() ? p_[pos_] : '\0'; }
  bool done() const { return pos_ >= p_.size(); }

  // A top-level alternative: leading ^ and trailing $ decide anchoring in search mode.
  RegexPtr top_sequence() {
    const bool start_anchor = eat('^');
    std::vector<RegexPtr> items = sequence_items(0);
    bool end_anchor = false;
    if (eat('$')) end_anchor = true;
    if (!done() && peek() != '|' && peek() != ')') fail("anchor '$' before the end of the pattern is not supported");
    if (mode_ == RegexMode::kSearch) {
      if (!start_anchor) items.insert(items.begin(), re_repeat(re_any_char(), 0, -1));
      if (!end_anchor) items.push_back(re_repeat(re_any_char(), 0, -1));
    }
    return re_concat(std::move(items));
  }

  std::vector<RegexPtr> sequence_items(int depth) {
    std::vector<RegexPtr> items;
    while (!done() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        if (depth == 0) break;  // the caller checks that it ends the alternative
        fail("anchor '$' inside a group is not supported");
      }
      if (peek() == '^') fail("anchor '^' after the start of the pattern is not supported");
      RegexPtr atom = parse_atom(depth);
      items.push_back(quantified(std::move(atom)));
    }
    return items;
  }

  RegexPtr alternation(int depth) {
    if (depth > kMaxGroupDepth) fail("groups nested too deeply");
    std::vector<RegexPtr> alts;
    do {
      alts.push_back(re_concat(sequence_items(depth)));
    } while (eat('|'));
    return re_alt(std::move(alts));
  }

  bool read_int(int& out) {
    const size_t start = pos_;
    long v = 0;
    while (!done() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (p_[pos_++] - '0');
      if (v > kMaxRepeatCount) fail(fmt::format("repetition count above {}", kMaxRepeatCount));
    }
    out = static_cast<int>(v);
    return pos_ > start;
  }

  RegexPtr quantified(RegexPtr atom) {
    for (;;) {
      int min = 0, max = -1;
      const size_t at = pos_;
      if (eat('*')) {
        min = 0, max = -1;
      } else if (eat('+')) {
        min = 1, max = -1;
      } else if (eat('?')) {
        min = 0, max = 1;
      } else if (eat('{')) {
        if (!read_int(min)) {
          pos_ = at;  // a literal '{' (Annex B)
          return atom;
        }
        max = min;
        if (eat(',')) {
          if (!read_int(max)) max = -1;
        }
        if (!eat('}')) {
          pos_ = at;
          return atom;
        }
        if (max >= 0 && max < min) fail("repetition {m,n} with n < m");
      } else {
        return atom;
      }
      eat('?');  // lazy: same language
      if (peek() == '*' || peek() == '+' || (peek() == '?' )) fail("nothing to repeat");
      atom = re_repeat(std::move(atom), min, max);
    }
  }

  RegexPtr parse_atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (eat('?')) {
        if (eat(':')) {
        } else if (peek() == '=' || peek() == '!') {
          fail("lookahead assertion (?= / (?! is not supported");
        } else if (p_.substr(pos_, 2) == "<=" || p_.substr(pos_, 2) == "<!") {
          fail("lookbehind assertion (?<= / (?<! is not supported");
        } else if (eat('<')) {
          while (!done() && peek() != '>') ++pos_;
          if (!eat('>')) fail("unterminated group name");
        } else {
          fail("unknown group flag after '(?'");
        }
      }
      RegexPtr inner = alternation(depth + 1);
      if (!eat(')')) fail("missing ')'");
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return re_chars(complement_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    }
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
    if (c == '{') {
      int dummy = 0;
      const size_t at = pos_++;
      if (read_int(dummy)) {
        pos_ = at;
        fail("nothing to repeat");
      }
      pos_ = at + 1;
      return re_char('{');
    }
    if (c == '\\') {
      ++pos_;
      std::vector<CodeRange> set;
      if (class_escape(set, false)) return re_chars(std::move(set));
      return re_char(char_escape());
    }
    return re_char(literal_char());
  }

  char32_t literal_char() {
    char32_t c = 0;
    if (!next_utf8(p_, pos_, c)) fail("invalid UTF-8");
    return c;
  }

  // After '\': \d \D \w \W \s \S into set; false when it is not a class escape.
  bool class_escape(std::vector<CodeRange>& set, bool in_class) {
    const char c = peek();
    std::vector<CodeRange> r;
    switch (c) {
      case 'd': r = regex_digit_class(); break;
      case 'D': r = complement_ranges(regex_digit_class()); break;
      case 'w': r = regex_word_class(); break;
      case 'W': r = complement_ranges(regex_word_class()); break;
      case 's': r = regex_space_class(); break;
      case 'S': r = complement_ranges(regex_space_class()); break;
      case 'b':
        if (in_class) return false;
        fail("word boundary \\b is not supported");
      case 'B':
        fail("word boundary \\B is not supported");
      case 'k':
        fail("backreference \\k<name> is not supported");
      case 'p':
      case 'P':
        fail("Unicode property escape \\p is not supported");
      default:
        if (c >= '1' && c <= '9') fail("backreference \\N is not supported");
        return false;
    }
    ++pos_;
    set.insert(set.end(), r.begin(), r.end());
    return true;
  }

  uint32_t hex_digits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      const char h = peek();
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      else if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0) fail("bad hexadecimal escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // After '\' (not a class escape): the escaped code point.
  char32_t char_escape() {
    if (done()) fail("pattern ends with '\\'");
    const char c = p_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case 'b': return '\b';  // only reached inside a class
      case '0':
        if (peek() >= '0' && peek() <= '9') fail("octal escapes are not supported");
        return 0;
      case 'c': {
        const char l = peek();
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) fail("bad control escape \\c");
        ++pos_;
        return static_cast<char32_t>(l % 32);
      }
      case 'x':
        return hex_digits(2);
      case 'u': {
        if (eat('{')) {
          uint32_t v = 0;
          int n = 0;
          while (!done() && peek() != '}') {
            v = v * 16 + hex_digits(1);
            if (++n > 6 || v > kMaxCodePoint) fail("code point escape out of range");
          }
          if (!eat('}') || n == 0) fail("bad \\u{...} escape");
          return v;
        }
        uint32_t v = hex_digits(4);
        // A surrogate pair written as two escapes.
        if (v >= 0xD800 && v <= 0xDBFF && p_.substr(pos_, 2) == "\\u") {
          const size_t at = pos_;
          pos_ += 2;
          const uint32_t lo = hex_digits(4);
          if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
          pos_ = at;
        }
        return v;
      }
      default: {
        --pos_;
        return literal_char();  // identity escape
      }
    }
  }

  RegexPtr parse_class() {
    ++pos_;  // '['
    const bool negate = eat('^');
    std::vector<CodeRange> set;
    bool first = true;
    while (true) {
      if (done()) fail("missing ']'");
      if (peek() == ']' && !first) break;
      if (peek() == ']' && first) break;  // ECMA: [] is the empty class
      first = false;
      char32_t lo = 0;
      if (!class_atom(set, lo)) continue;  // a class escape was added
      if (peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        char32_t hi = 0;
        if (!class_atom(set, hi)) fail("class escape used as a range bound");
        if (hi < lo) fail("range out of order in character class");
        set.push_back({lo, hi});
      } else {
        set.push_back({lo, lo});
      }
    }
    ++pos_;  // ']'
    return re_chars(negate ? complement_ranges(set) : normalize_ranges(set));
  }

  // One class member: false when it was a class escape (added to set), else the code point.
  bool class_atom(std::vector<CodeRange>& set, char32_t& c) {
    if (eat('\\')) {
      if (class_escape(set, true)) return false;
      if (peek() == '-') {
        ++pos_;
        c = '-';
        return true;
      }
      c = char_escape();
      return true;
    }
    c = literal_char();
    return true;
  }

  std::string_view p_;
  RegexMode mode_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<CodeRange> regex_digit_class() { return {{'0', '9'}}; }
std::vector<CodeRange> regex_word_class() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
std::vector<CodeRange> regex_space_class() {
  return normalize_ranges({{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                           {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                           {0xFEFF, 0xFEFF}});
}

RegexPtr parse_regex(std::string_view pattern, RegexMode mode) { return RegexParser(pattern, mode).parse(); }

}  // namespace spindle::grammar
