#include "grammar/regex_ast.h"

#include <algorithm>

#include "util/error.h"

namespace spindle::grammar {
namespace {

RegexPtr make(RegexNode node) { return std::make_shared<const RegexNode>(std::move(node)); }

}  // namespace

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  std::vector<CodeRange> out;
  for (const CodeRange& r : ranges) {
    if (r.lo > r.hi) continue;
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges) {
  std::vector<CodeRange> out;
  char32_t next = 0;
  for (const CodeRange& r : normalize_ranges(ranges)) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

RegexPtr re_empty() { return make(RegexNode{}); }

RegexPtr re_chars(std::vector<CodeRange> ranges) {
  RegexNode n;
  n.kind = RegexNode::Kind::kChars;
  n.ranges = normalize_ranges(std::move(ranges));
  return make(std::move(n));
}

RegexPtr re_char(char32_t c) { return re_chars({{c, c}}); }

RegexPtr re_bytes(uint8_t lo, uint8_t hi) {
  RegexNode n;
  n.kind = RegexNode::Kind::kBytes;
  n.ranges = {{lo, hi}};
  return make(std::move(n));
}

RegexPtr re_literal(std::string_view utf8) {
  std::vector<RegexPtr> parts;
  size_t pos = 0;
  while (pos < utf8.size()) {
    char32_t c = 0;
    const size_t at = pos;
    if (next_utf8(utf8, pos, c)) {
      parts.push_back(re_char(c));
    } else {  // not UTF-8: match the raw byte
      pos = at + 1;
      const auto b = static_cast<uint8_t>(utf8[at]);
      parts.push_back(re_bytes(b, b));
    }
  }
  return re_concat(std::move(parts));
}

RegexPtr re_concat(std::vector<RegexPtr> parts) {
  std::vector<RegexPtr> flat;
  for (RegexPtr& p : parts) {
    if (p->kind == RegexNode::Kind::kEmpty) continue;
    if (p->kind == RegexNode::Kind::kConcat) {
      flat.insert(flat.end(), p->children.begin(), p->children.end());
    } else {
      flat.push_back(std::move(p));
    }
  }
  if (flat.empty()) return re_empty();
  if (flat.size() == 1) return flat[0];
  RegexNode n;
  n.kind = RegexNode::Kind::kConcat;
  n.children = std::move(flat);
  return make(std::move(n));
}

RegexPtr re_alt(std::vector<RegexPtr> parts) {
  if (parts.size() == 1) return parts[0];
  RegexNode n;
  n.kind = RegexNode::Kind::kAlt;
  n.children = std::move(parts);
  return make(std::move(n));
}

RegexPtr re_repeat(RegexPtr child, int min, int max) {
  SPINDLE_CHECK(min >= 0 && (max < 0 || max >= min), "bad repetition {{{},{}}}", min, max);
  if (min == 1 && max == 1) return child;
  if (max == 0) return re_empty();
  RegexNode n;
  n.kind = RegexNode::Kind::kRepeat;
  n.children = {std::move(child)};
  n.min = min;
  n.max = max;
  return make(std::move(n));
}

RegexPtr re_optional(RegexPtr child) { return re_repeat(std::move(child), 0, 1); }

RegexPtr re_any_char() { return re_chars({{0, kMaxCodePoint}}); }

namespace {

void append_hex(std::string& out, uint32_t v) {
  char buf[8];
  int n = 0;
  do {
    buf[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v != 0);
  while (n > 0) out += buf[--n];
}

// regex_key's text appended to out (one buffer for the whole tree: linear in its size).
void append_key(const RegexNode& node, std::string& out) {
  switch (node.kind) {
    case RegexNode::Kind::kEmpty:
      out += "()";
      return;
    case RegexNode::Kind::kChars:
    case RegexNode::Kind::kBytes:
      out += node.kind == RegexNode::Kind::kChars ? "[" : "B[";
      for (const CodeRange& r : node.ranges) {
        append_hex(out, static_cast<uint32_t>(r.lo));
        out += '-';
        append_hex(out, static_cast<uint32_t>(r.hi));
        out += ',';
      }
      out += ']';
      return;
    case RegexNode::Kind::kConcat:
    case RegexNode::Kind::kAlt:
      out += node.kind == RegexNode::Kind::kConcat ? "(" : "(|";
      for (const RegexPtr& c : node.children) {
        append_key(*c, out);
        if (node.kind == RegexNode::Kind::kAlt) out += '|';
      }
      out += ')';
      return;
    case RegexNode::Kind::kRepeat:
      append_key(*node.children[0], out);
      out += '{';
      out += std::to_string(node.min);
      out += ',';
      out += std::to_string(node.max);
      out += '}';
      return;
  }
}

}  // namespace

std::string regex_key(const RegexNode& node) {
  std::string out;
  append_key(node, out);
  return out;
}

bool regex_nullable(const RegexNode& node) {
  switch (node.kind) {
    case RegexNode::Kind::kEmpty:
      return true;
    case RegexNode::Kind::kChars:
    case RegexNode::Kind::kBytes:
      return false;
    case RegexNode::Kind::kConcat:
      return std::all_of(node.children.begin(), node.children.end(),
                         [](const RegexPtr& c) { return regex_nullable(*c); });
    case RegexNode::Kind::kAlt:
      return std::any_of(node.children.begin(), node.children.end(),
                         [](const RegexPtr& c) { return regex_nullable(*c); });
    case RegexNode::Kind::kRepeat:
      return node.min == 0 || regex_nullable(*node.children[0]);
  }
  return false;
}

bool next_utf8(std::string_view text, size_t& pos, char32_t& c) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  int len = 0;
  char32_t min = 0;
  if (b0 < 0x80) {
    c = b0;
    pos += 1;
    return true;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return false;
  }
  if (pos + len > text.size()) return false;
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(text[pos + i]);
    if ((b & 0xC0) != 0x80) return false;
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > kMaxCodePoint || (c >= 0xD800 && c <= 0xDFFF)) return false;
  pos += len;
  return true;
}

}  // namespace spindle::grammar
