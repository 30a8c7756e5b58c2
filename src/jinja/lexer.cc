#include "jinja/lexer.h"

#include "jinja/pystring.h"
#include "jinja/template_error.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace spindle::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// jinja2 splits the source on \r\n, \r and \n, joins with \n and drops a final empty line.
std::string normalise_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const std::string& name) : src_(std::move(source)), name_(name) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_text_and_tag();
    tokens_.push_back(Token{TokenType::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    JINJA_FAIL_KIND(ErrorKind::kSyntax, "template {} line {}: {}", name_, line_, what);
  }

  void advance_to(size_t new_pos) {
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(pos_),
                                         src_.begin() + static_cast<std::ptrdiff_t>(new_pos), '\n'));
    pos_ = new_pos;
  }

  void skip_whitespace() {
    size_t p = pos_;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    advance_to(p);
  }

  // The position of the next "{{", "{%" or "{#" at or after `from`, or npos.
  size_t find_tag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  // Applies "-" / lstrip_blocks to the text before a tag and emits it.
  void emit_text(std::string text, size_t text_start, char sign, bool block_like) {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_ws(text[end - 1])) --end;
      text.resize(end);
    } else if (sign != '+' && block_like) {
      const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      const bool line_starting = line_start > 0 || text_start == 0 || src_[text_start - 1] == '\n';
      if (line_starting && line_start < text.size() &&
          std::all_of(text.begin() + static_cast<std::ptrdiff_t>(line_start), text.end(), is_ws))
        text.resize(line_start);
    }
    if (!text.empty()) tokens_.push_back(Token{TokenType::kText, std::move(text), text_line_});
  }

  void lex_text_and_tag() {
    const size_t start = pos_;
    text_line_ = line_;
    const size_t tag = find_tag(pos_);
    if (tag == std::string::npos) {
      emit_text(src_.substr(start), start, 0, false);
      advance_to(src_.size());
      return;
    }
    const char type = src_[tag + 1];
    const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
    std::string text = src_.substr(start, tag - start);
    if (type == '%' && is_raw_begin(tag + 2 + (sign ? 1 : 0))) {
      emit_text(std::move(text), start, sign, true);
      advance_to(tag);
      lex_raw(sign);
      return;
    }
    emit_text(std::move(text), start, sign, type != '{');
    advance_to(tag + 2 + (sign ? 1 : 0));
    if (type == '#') {
      lex_comment();
    } else if (type == '%') {
      tokens_.push_back(Token{TokenType::kBlockBegin, "", line_});
      lex_tag_body(/*block=*/true);
    } else {
      tokens_.push_back(Token{TokenType::kVarBegin, "", line_});
      lex_tag_body(/*block=*/false);
    }
  }

  // After "{%" and its sign: whitespace, "raw", whitespace, then "-%}" or "%}".
  bool is_raw_begin(size_t p) const {
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  void lex_raw(char /*begin_sign*/) {
    // The begin tag: "-%}" strips following whitespace; no trim_blocks newline here (as jinja2).
    size_t p = src_.find("%}", pos_);
    const bool strip_after = src_[p - 1] == '-';
    advance_to(p + 2);
    if (strip_after) skip_whitespace();
    const size_t body_start = pos_;
    text_line_ = line_;
    // The end tag: "{%" [-+] ws "endraw" ws ("+%}" | "-%}" ws | "%}" "\n"?).
    for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 2)) {
      size_t r = q + 2;
      const char sign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : 0;
      if (sign) ++r;
      while (r < src_.size() && is_ws(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_ws(src_[r])) ++r;
      char end_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_sign = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) continue;
      emit_text(src_.substr(body_start, q - body_start), body_start, sign, true);
      advance_to(r + 2);
      finish_block_end(end_sign);
      return;
    }
    fail("missing end of raw directive");
  }

  // After a "%}" or "#}": "-" strips whitespace, "+" keeps it, else trim_blocks drops one "\n".
  void finish_block_end(char sign) {
    if (sign == '-') skip_whitespace();
    else if (sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') advance_to(pos_ + 1);
  }

  void lex_comment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("missing end of comment tag");
    const char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    advance_to(end + 2);
    finish_block_end(sign);
  }

  void lex_tag_body(bool block) {
    int depth = 0;  // open brackets: an end delimiter inside them is not the end of the tag
    while (true) {
      skip_whitespace();
      if (pos_ >= src_.size()) fail(block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      if (depth == 0 && try_tag_end(block)) return;
      lex_expression_token(depth);
    }
  }

  bool try_tag_end(bool block) {
    const char* close = block ? "%}" : "}}";
    char sign = 0;
    size_t p = pos_;
    if (src_[p] == '-' || (block && src_[p] == '+')) {
      if (src_.compare(p + 1, 2, close) != 0) return false;
      sign = src_[p];
      ++p;
    } else if (src_.compare(p, 2, close) != 0) {
      return false;
    }
    tokens_.push_back(Token{block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", line_});
    advance_to(p + 2);
    if (block) finish_block_end(sign);
    else if (sign == '-') skip_whitespace();
    return true;
  }

  void lex_expression_token(int& depth) {
    const char c = src_[pos_];
    if (is_name_start(c)) {
      size_t p = pos_;
      while (p < src_.size() && is_name_char(src_[p])) ++p;
      tokens_.push_back(Token{TokenType::kName, src_.substr(pos_, p - pos_), line_});
      advance_to(p);
    } else if (is_digit(c)) {
      lex_number();
    } else if (c == '\'' || c == '"') {
      lex_string(c);
    } else {
      static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                   "=", ".", ",", ":", "|", "(", ")", "[", "]", "{", "}"};
      for (const char* op : kOps) {
        const size_t n = std::char_traits<char>::length(op);
        if (src_.compare(pos_, n, op) != 0) continue;
        if (n == 1 && (c == '(' || c == '[' || c == '{')) ++depth;
        if (n == 1 && (c == ')' || c == ']' || c == '}')) {
          if (depth == 0) fail(fmt::format("unexpected '{}'", c));
          --depth;
        }
        tokens_.push_back(Token{TokenType::kOperator, op, line_});
        advance_to(pos_ + n);
        return;
      }
      fail(fmt::format("unexpected char '{}'", c));
    }
  }

  void lex_number() {
    size_t p = pos_;
    auto digits = [&] {
      while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])))) ++p;
    };
    digits();
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
      is_float = true;
      ++p;
      digits();
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        is_float = true;
        p = q;
        digits();
      }
    }
    std::string text = src_.substr(pos_, p - pos_);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token t{is_float ? TokenType::kFloat : TokenType::kInt, text, line_};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      auto res = std::from_chars(text.data(), text.data() + text.size(), t.int_value);
      if (res.ec != std::errc()) fail(fmt::format("integer literal {} does not fit in 64 bits", text));
    }
    tokens_.push_back(std::move(t));
    advance_to(p);
  }

  void lex_string(char quote) {
    std::string value;
    size_t p = pos_ + 1;
    while (true) {
      if (p >= src_.size()) fail("unterminated string");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail("unterminated string");
      p += decode_escape(p + 1, value) + 1;
    }
    tokens_.push_back(Token{TokenType::kString, std::move(value), line_});
    advance_to(p + 1);
  }

  // Python's string escapes after a backslash at src_[p - 1]; returns the characters consumed.
  size_t decode_escape(size_t p, std::string& out) {
    const char c = src_[p];
    switch (c) {
      case 'n': out.push_back('\n'); return 1;
      case 't': out.push_back('\t'); return 1;
      case 'r': out.push_back('\r'); return 1;
      case '\\': out.push_back('\\'); return 1;
      case '\'': out.push_back('\''); return 1;
      case '"': out.push_back('"'); return 1;
      case 'a': out.push_back('\a'); return 1;
      case 'b': out.push_back('\b'); return 1;
      case 'f': out.push_back('\f'); return 1;
      case 'v': out.push_back('\v'); return 1;
      case '\n': return 1;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = c == 'x' ? 2 : (c == 'u' ? 4 : 8);
        if (p + n >= src_.size()) fail("truncated \\x/\\u escape in string");
        uint32_t cp = 0;
        for (size_t k = 1; k <= n; ++k) {
          const char h = src_[p + k];
          int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
          if (d < 0) fail("bad \\x/\\u escape in string");
          cp = cp * 16 + static_cast<uint32_t>(d);
        }
        if (cp > 0x10ffff) fail("\\U escape out of range");
        py::append_code_point(out, cp);
        return n + 1;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          while (k < 3 && p + k < src_.size() && src_[p + k] >= '0' && src_[p + k] <= '7') cp = cp * 8 + (src_[p + k++] - '0');
          py::append_code_point(out, cp);
          return k;
        }
        out.push_back('\\');  // unknown escapes stay as written
        return 0;
    }
  }

  std::string src_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
  int text_line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const std::string& template_name) {
  return Lexer(normalise_newlines(source), template_name).run();
}

}  // namespace spindle::jinja
