#include "grammar/json_lexemes.h"

#include <map>
#include <string>

#include "grammar/regex_parser.h"
#include "util/error.h"

namespace spindle::grammar {
namespace {

RegexPtr rx(std::string_view pattern) { return parse_regex(pattern, RegexMode::kFullMatch); }
RegexPtr digits(int min, int max = -1) { return re_repeat(re_chars({{'0', '9'}}), min, max); }

// Decimal strings of equal length n, from x to y (x <= y as numbers), no sign.
RegexPtr same_length_range(const std::string& x, const std::string& y) {
  const size_t n = x.size();
  if (n == 0) return re_empty();
  if (n == 1) return re_chars({{static_cast<char32_t>(x[0]), static_cast<char32_t>(y[0])}});
  if (x[0] == y[0]) return re_concat({re_char(static_cast<char32_t>(x[0])), same_length_range(x.substr(1), y.substr(1))});
  const std::string zeros(n - 1, '0'), nines(n - 1, '9');
  if (x.substr(1) == zeros && y.substr(1) == nines) {
    return re_concat({re_chars({{static_cast<char32_t>(x[0]), static_cast<char32_t>(y[0])}}), digits(static_cast<int>(n - 1), static_cast<int>(n - 1))});
  }
  std::vector<RegexPtr> alts;
  alts.push_back(re_concat({re_char(static_cast<char32_t>(x[0])), same_length_range(x.substr(1), nines)}));
  if (y[0] - x[0] >= 2) {
    alts.push_back(re_concat({re_chars({{static_cast<char32_t>(x[0] + 1), static_cast<char32_t>(y[0] - 1)}}),
                              digits(static_cast<int>(n - 1), static_cast<int>(n - 1))}));
  }
  alts.push_back(re_concat({re_char(static_cast<char32_t>(y[0])), same_length_range(zeros, y.substr(1))}));
  return re_alt(std::move(alts));
}

// Non-negative integers in [a, b] (b nullopt: unbounded) without leading zeros.
RegexPtr natural_range(uint64_t a, std::optional<uint64_t> b) {
  std::vector<RegexPtr> alts;
  if (a == 0) {
    alts.push_back(re_char('0'));
    a = 1;
    if (b && *b == 0) return alts[0];
  }
  std::string sa = std::to_string(a);
  for (size_t len = sa.size();; ++len) {
    const std::string lo = len == sa.size() ? sa : "1" + std::string(len - 1, '0');
    if (b && std::to_string(*b).size() < len) break;
    if (!b && len > sa.size()) {  // every longer number
      alts.push_back(re_concat({re_chars({{'1', '9'}}), digits(static_cast<int>(len - 1))}));
      break;
    }
    const std::string hi = (b && std::to_string(*b).size() == len) ? std::to_string(*b) : std::string(len, '9');
    if (lo.size() == hi.size() && lo <= hi) alts.push_back(same_length_range(lo, hi));
    if (b && std::to_string(*b).size() == len) break;
  }
  if (alts.empty()) return re_chars({});
  return re_alt(std::move(alts));
}

RegexPtr fraction() { return re_concat({re_char('.'), digits(1)}); }
RegexPtr zero_fraction() { return re_optional(re_concat({re_char('.'), re_repeat(re_char('0'), 1, -1)})); }
RegexPtr nonzero_fraction() {
  return re_concat({re_char('.'), re_repeat(re_char('0'), 0, -1), re_chars({{'1', '9'}}), digits(0)});
}

// Non-negative decimals w (integer part, optional fraction) with lower bound a and upper bound b
// on w (integral), each inclusive or exclusive.
RegexPtr decimal_range(uint64_t a, bool a_excl, std::optional<uint64_t> b, bool b_excl) {
  std::vector<RegexPtr> alts;
  // Integer part p strictly between the bounds: any fraction.
  const uint64_t p_lo = a + 1;
  if (!b || (*b >= 1 && p_lo <= *b - 1)) {
    alts.push_back(re_concat({natural_range(p_lo, b ? std::optional<uint64_t>(*b - 1) : std::nullopt),
                              re_optional(fraction())}));
  }
  // p == a: fraction zero allowed unless exclusive; nonzero fraction allowed if a < b.
  if (!b || a < *b) {
    alts.push_back(re_concat({natural_range(a, a), a_excl ? nonzero_fraction() : re_optional(fraction())}));
  } else if (a == *b && !a_excl && !b_excl) {
    alts.push_back(re_concat({natural_range(a, a), zero_fraction()}));
  }
  // p == b (b > a): only a zero fraction, and only when inclusive.
  if (b && *b > a && !b_excl) alts.push_back(re_concat({natural_range(*b, *b), zero_fraction()}));
  if (alts.empty()) return re_chars({});
  return re_alt(std::move(alts));
}

}  // namespace

RegexPtr json_string_char() {
  static const RegexPtr r = re_alt({
      re_chars(complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}})),
      rx(R"(\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))"),
  });
  return r;
}

RegexPtr json_string(int min_length, int max_length) {
  return re_concat({re_char('"'), re_repeat(json_string_char(), min_length, max_length), re_char('"')});
}

namespace {

RegexPtr escape_value(const RegexPtr& v) {
  switch (v->kind) {
    case RegexNode::Kind::kEmpty:
    case RegexNode::Kind::kBytes:
      return v;
    case RegexNode::Kind::kChars: {
      std::vector<RegexPtr> alts;
      std::vector<CodeRange> plain;
      for (const CodeRange& r : v->ranges) plain.push_back(r);
      // Characters that must be escaped leave the plain set and come back as escapes.
      std::vector<CodeRange> need = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      std::vector<CodeRange> keep;
      for (const CodeRange& r : complement_ranges(need)) keep.push_back(r);
      std::vector<CodeRange> literal;
      for (const CodeRange& a : plain) {
        for (const CodeRange& k : keep) {
          const char32_t lo = std::max(a.lo, k.lo), hi = std::min(a.hi, k.hi);
          if (lo <= hi) literal.push_back({lo, hi});
        }
      }
      if (!literal.empty()) alts.push_back(re_chars(literal));
      // Characters that must be escaped: '"', '\\', and the controls (short escapes where JSON
      // has them, else \u00XX; all 32 controls as one \u00[01]X pattern).
      bool all_controls = false;
      for (const CodeRange& a : plain) all_controls = all_controls || (a.lo == 0 && a.hi >= 0x1F);
      static const RegexPtr kControlEscape = rx(R"(\\(u00[01][0-9a-fA-F]|[bfnrt]))");
      if (all_controls) alts.push_back(kControlEscape);
      for (const CodeRange& a : plain) {
        for (char32_t c = a.lo; c <= std::min<char32_t>(a.hi, 0x5C); ++c) {
          std::string esc;
          if (c == '"') esc = "\\\"";
          else if (c == '\\') esc = "\\\\";
          else if (c < 0x20 && !all_controls) {
            switch (c) {
              case '\n': esc = "\\n"; break;
              case '\r': esc = "\\r"; break;
              case '\t': esc = "\\t"; break;
              case '\b': esc = "\\b"; break;
              case '\f': esc = "\\f"; break;
              default: esc = fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
            }
          }
          if (!esc.empty()) alts.push_back(re_literal(esc));
        }
      }
      if (alts.empty()) return re_chars({});
      return re_alt(std::move(alts));
    }
    case RegexNode::Kind::kConcat:
    case RegexNode::Kind::kAlt: {
      std::vector<RegexPtr> parts;
      for (const RegexPtr& c : v->children) parts.push_back(escape_value(c));
      return v->kind == RegexNode::Kind::kConcat ? re_concat(std::move(parts)) : re_alt(std::move(parts));
    }
    case RegexNode::Kind::kRepeat:
      return re_repeat(escape_value(v->children[0]), v->min, v->max);
  }
  return v;
}

}  // namespace

namespace {

struct NameTrie {
  bool terminal = false;
  std::map<char32_t, NameTrie> children;
};

// Prefixes that leave the trie: a node's path followed by a code point none of its names has
// next (any continuation may follow these).
RegexPtr diverging(const NameTrie& n) {
  std::vector<CodeRange> used;
  for (const auto& [c, sub] : n.children) used.push_back({c, c});
  std::vector<RegexPtr> alts = {re_chars(complement_ranges(used))};
  for (const auto& [c, sub] : n.children) alts.push_back(re_concat({re_char(c), diverging(sub)}));
  return re_alt(std::move(alts));
}

// Proper prefixes of the names that are not names themselves (paths to non-terminal nodes).
RegexPtr unfinished(const NameTrie& n) {
  std::vector<RegexPtr> alts;
  if (!n.terminal) alts.push_back(re_empty());
  for (const auto& [c, sub] : n.children) alts.push_back(re_concat({re_char(c), unfinished(sub)}));
  if (alts.empty()) return re_chars({});
  return re_alt(std::move(alts));
}

}  // namespace

RegexPtr json_key_not_in(const std::vector<std::string>& names) {
  NameTrie root;
  for (const std::string& n : names) {
    NameTrie* node = &root;
    size_t pos = 0;
    char32_t c = 0;
    while (pos < n.size()) {
      if (!next_utf8(n, pos, c)) SPINDLE_FAIL("property name is not valid UTF-8");
      node = &node->children[c];
    }
    node->terminal = true;
  }
  // Not a name = leaves the trie somewhere (then anything), or stops before a name ends.
  return json_quoted(re_alt({re_concat({diverging(root), re_repeat(re_any_char(), 0, -1)}), unfinished(root)}));
}

RegexPtr json_quoted(const RegexPtr& value) { return re_concat({re_char('"'), escape_value(value), re_char('"')}); }

std::optional<RegexPtr> json_format_regex(std::string_view format) {
  static const std::string kDate =
      R"(\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8])))";
  static const std::string kTime = R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::string kHex = "[0-9a-fA-F]";
  static const std::string kLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  if (format == "date") return rx(kDate);
  if (format == "time") return rx(kTime);
  if (format == "date-time") return rx(kDate + "T" + kTime);
  if (format == "duration") {
    const std::string t = R"(T(\d+H(\d+M)?(\d+S)?|\d+M(\d+S)?|\d+S))";
    return rx("P((\\d+Y(\\d+M)?(\\d+D)?|\\d+M(\\d+D)?|\\d+D)(" + t + ")?|" + t + "|\\d+W)");
  }
  if (format == "email") {
    const std::string atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    return rx(atom + "(\\." + atom + ")*@" + kLabel + "(\\." + kLabel + ")*");
  }
  if (format == "hostname") return rx(kLabel + "(\\." + kLabel + ")*");
  if (format == "ipv4") {
    const std::string octet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
    return rx(octet + "(\\." + octet + "){3}");
  }
  if (format == "ipv6") {
    const std::string h = kHex + "{1,4}";
    const std::string g = "(" + h + ":)";
    const std::string c = "(:" + h + ")";
    return rx(g + "{7}" + h + "|" + g + "{1,7}:|" + g + "{1,6}:" + h + "|" + g + "{1,5}" + c + "{1,2}|" + g +
              "{1,4}" + c + "{1,3}|" + g + "{1,3}" + c + "{1,4}|" + g + "{1,2}" + c + "{1,5}|" + h + ":" + c +
              "{1,6}|:(" + c + "{1,7}|:)");
  }
  if (format == "uri") {
    return rx(R"([A-Za-z][A-Za-z0-9+.\-]*:([A-Za-z0-9\-._~!$&'()*+,;=:@/?#\[\]]|%[0-9A-Fa-f]{2})*)");
  }
  if (format == "uri-template") {
    // RFC 6570: literals (no space, " ' % < > \ ^ ` { | }, pct-encoded allowed) and expressions
    // "{" [operator] varspec *("," varspec) "}"; non-ASCII literals within the BMP only.
    const std::string pct = "%[0-9A-Fa-f]{2}";
    const std::string varchar = "([A-Za-z0-9_]|" + pct + ")";
    const std::string varspec = varchar + "(\\.?" + varchar + ")*(:[1-9][0-9]{0,3}|\\*)?";
    return rx(R"(([!#$&()*+,\-./0-9:;=?@A-Z\[\]_a-z~\u00A0-\uD7FF\uE000-\uFFFD]|)" + pct + R"(|\{[+#./;?&=,!@|]?)" +
              varspec + "(," + varspec + R"()*\})*)");
  }
  if (format == "uuid") return rx(kHex + "{8}-" + kHex + "{4}-" + kHex + "{4}-" + kHex + "{4}-" + kHex + "{12}");
  return std::nullopt;
}

RegexPtr json_integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) return re_chars({});
  std::vector<RegexPtr> alts;
  // Negative part: -(n) for n in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const uint64_t n_lo = hi && *hi < 0 ? static_cast<uint64_t>(-(*hi + 1)) + 1 : 1;
    std::optional<uint64_t> n_hi;
    if (lo) n_hi = static_cast<uint64_t>(-(*lo + 1)) + 1;
    alts.push_back(re_concat({re_char('-'), natural_range(n_lo, n_hi)}));
  }
  if (!hi || *hi >= 0) {
    const uint64_t p_lo = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> p_hi;
    if (hi) p_hi = static_cast<uint64_t>(*hi);
    alts.push_back(natural_range(p_lo, p_hi));
  }
  return re_alt(std::move(alts));
}

RegexPtr json_number() {
  static const RegexPtr r = rx(R"(-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?)");
  return r;
}

RegexPtr json_number_range(std::optional<int64_t> lo, bool lo_excl, std::optional<int64_t> hi, bool hi_excl) {
  if (!lo && !hi) return json_number();
  std::vector<RegexPtr> alts;
  // v >= 0 part: w = v in [max(lo, 0), hi].
  if (!hi || *hi > 0 || (*hi == 0 && !hi_excl)) {
    const bool from_zero = !lo || *lo < 0;
    const uint64_t a = from_zero ? 0 : static_cast<uint64_t>(*lo);
    std::optional<uint64_t> b;
    if (hi) b = static_cast<uint64_t>(*hi);
    alts.push_back(decimal_range(a, from_zero ? false : lo_excl, b, hi_excl));
  }
  // v < 0 part: w = -v in (max(-hi, 0), -lo].
  if (!lo || *lo < 0) {
    const bool from_zero = !hi || *hi >= 0;
    const uint64_t a = from_zero ? 0 : static_cast<uint64_t>(-*hi);
    std::optional<uint64_t> b;
    if (lo) b = static_cast<uint64_t>(-*lo);
    // w > 0 strictly when starting at zero (v = -0 is 0, already in the first part).
    alts.push_back(re_concat({re_char('-'), decimal_range(a, from_zero ? true : hi_excl, b, lo_excl)}));
  }
  if (alts.empty()) return re_chars({});
  return re_alt(std::move(alts));
}

}  // namespace spindle::grammar
