#include "grammar/gbnf.h"

#include <map>
#include <set>
#include <string>

#include "grammar/regex_ast.h"
#include "util/error.h"

namespace spindle::grammar {
namespace {

class GbnfParser {
 public:
  GbnfParser(std::string_view text, size_t max_productions) : t_(text) { g_.set_max_productions(max_productions); }

  Grammar parse() {
    skip(true);
    while (!done()) {
      const size_t at = pos_;
      const std::string name = read_name();
      if (name.empty()) fail("expected a rule name");
      skip(false);
      if (t_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      skip(true);
      const int32_t nt = rule(name);
      if (defined_.count(name)) {
        pos_ = at;
        fail("rule '" + name + "' is defined twice");
      }
      defined_.insert(name);
      for (auto& seq : alternatives(0)) g_.add_production(nt, std::move(seq));
      if (!done() && peek() != '\n' && peek() != '\r') fail("expected the end of the rule");
      skip(true);
    }
    for (const auto& [name, nt] : rules_) {
      if (!defined_.count(name)) SPINDLE_FAIL("gbnf: rule '{}' is used but not defined", name);
    }
    auto root = rules_.find("root");
    if (root == rules_.end()) SPINDLE_FAIL("gbnf: the grammar has no 'root' rule");
    g_.set_start(root->second);
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    SPINDLE_FAIL("gbnf: {} at line {} column {}", what, line, col);
  }
  bool done() const { return pos_ >= t_.size(); }
  char peek(size_t k = 0) const { return pos_ + k < t_.size() ? t_[pos_ + k] : '\0'; }

  // Skips spaces, tabs and comments; newlines too when newlines is true.
  void skip(bool newlines) {
    while (!done()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
        ++pos_;
      } else if (c == '#') {
        while (!done() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  static bool word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string read_name() {
    const size_t s = pos_;
    while (!done() && word_char(peek())) ++pos_;
    return std::string(t_.substr(s, pos_ - s));
  }

  int32_t rule(const std::string& name) {
    auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    const int32_t nt = g_.add_nonterminal(name);
    rules_.emplace(name, nt);
    return nt;
  }

  std::vector<std::vector<int32_t>> alternatives(int depth) {
    if (depth > kMaxGroupDepth) fail("groups nested too deeply");
    std::vector<std::vector<int32_t>> out;
    out.push_back(sequence(depth));
    while (peek() == '|') {
      ++pos_;
      skip(true);
      out.push_back(sequence(depth));
    }
    return out;
  }

  std::vector<int32_t> sequence(int depth) {
    std::vector<int32_t> seq;
    for (;;) {
      skip(depth > 0);
      const char c = peek();
      if (done() || c == '|' || c == ')' || c == '\n' || c == '\r') break;
      // A rule name followed by ::= starts the next rule (rules may follow without a blank line).
      if (word_char(c)) {
        const size_t at = pos_;
        read_name();
        skip(false);
        const bool next_rule = t_.substr(pos_, 3) == "::=";
        pos_ = at;
        if (next_rule) break;
      }
      std::vector<int32_t> item = atom(depth);
      int32_t sym;
      if (item.size() == 1) {
        sym = item[0];
      } else {
        sym = g_.add_nonterminal("seq");
        g_.add_production(sym, item);
      }
      bool repeated = false;
      for (;;) {
        int min = 0, max = -1;
        if (peek() == '*') ++pos_, min = 0, max = -1;
        else if (peek() == '+') ++pos_, min = 1, max = -1;
        else if (peek() == '?') ++pos_, min = 0, max = 1;
        else if (peek() == '{') repetition(min, max);
        else break;
        sym = g_.repeat(sym, min, max);
        repeated = true;
      }
      if (repeated || item.size() == 1) {
        seq.push_back(sym);
      } else {
        seq.insert(seq.end(), item.begin(), item.end());
      }
    }
    return seq;
  }

  int read_int() {
    if (!(peek() >= '0' && peek() <= '9')) fail("expected a number");
    long v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (t_[pos_++] - '0');
      if (v > kMaxRepeatCount) fail(fmt::format("repetition count above {}", kMaxRepeatCount));
    }
    return static_cast<int>(v);
  }

  void repetition(int& min, int& max) {
    ++pos_;  // '{'
    skip(false);
    min = read_int();
    max = min;
    skip(false);
    if (peek() == ',') {
      ++pos_;
      skip(false);
      max = (peek() >= '0' && peek() <= '9') ? read_int() : -1;
      skip(false);
    }
    if (peek() != '}') fail("expected '}'");
    ++pos_;
    if (max >= 0 && max < min) fail("repetition {m,n} with n < m");
  }

  char32_t code_point() {
    char32_t c = 0;
    if (!next_utf8(t_, pos_, c)) fail("invalid UTF-8");
    return c;
  }

  char32_t hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      const char h = peek();
      int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (d < 0) fail("bad hexadecimal escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodePoint) fail("code point out of range");
    return v;
  }

  // One (possibly escaped) code point inside "..." or [...].
  char32_t char_in_terminal() {
    if (peek() != '\\') return code_point();
    ++pos_;
    const char e = peek();
    ++pos_;
    switch (e) {
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      case 't': return '\t';
      case 'n': return '\n';
      case 'r': return '\r';
      case '\\': return '\\';
      case '"': return '"';
      case '[': return '[';
      case ']': return ']';
      case '-': return '-';
      default: --pos_; fail(std::string("unknown escape \\") + e);
    }
  }

  std::vector<int32_t> atom(int depth) {
    const char c = peek();
    if (c == '"') {
      ++pos_;
      std::vector<int32_t> out;
      while (peek() != '"') {
        if (done() || peek() == '\n') fail("unterminated string literal");
        out.push_back(g_.lexeme(re_char(char_in_terminal())));
      }
      ++pos_;
      if (out.empty()) {  // "" derives the empty string
        const int32_t e = g_.add_nonterminal("empty");
        g_.add_production(e, {});
        out.push_back(e);
      }
      return out;
    }
    if (c == '[') {
      ++pos_;
      const bool negate = peek() == '^';
      if (negate) ++pos_;
      std::vector<CodeRange> set;
      while (peek() != ']') {
        if (done() || peek() == '\n') fail("unterminated character class");
        const char32_t lo = char_in_terminal();
        char32_t hi = lo;
        if (peek() == '-' && peek(1) != ']') {
          ++pos_;
          hi = char_in_terminal();
          if (hi < lo) fail("range out of order in character class");
        }
        set.push_back({lo, hi});
      }
      ++pos_;
      return {g_.lexeme(re_chars(negate ? complement_ranges(set) : normalize_ranges(set)))};
    }
    if (c == '.') {
      ++pos_;
      return {g_.lexeme(re_any_char())};
    }
    if (c == '(') {
      ++pos_;
      skip(true);
      const int32_t nt = g_.add_nonterminal("group");
      for (auto& seq : alternatives(depth + 1)) g_.add_production(nt, std::move(seq));
      skip(true);
      if (peek() != ')') fail("expected ')'");
      ++pos_;
      return {nt};
    }
    if (c == '<' || c == '!') fail("token references (<[id]>, <token>, !<...>) are not supported");
    if (word_char(c)) return {rule(read_name())};
    fail(std::string("unexpected character '") + c + "'");
  }

  std::string_view t_;
  size_t pos_ = 0;
  Grammar g_;
  std::map<std::string, int32_t> rules_;
  std::set<std::string> defined_;
};

}  // namespace

Grammar grammar_from_gbnf(std::string_view text, size_t max_productions) {
  return GbnfParser(text, max_productions).parse();
}

}  // namespace spindle::grammar
