// The regular-expression tree every front end builds lexemes from (JSON Schema strings and
// patterns, GBNF terminals, regexes, choices). Characters are Unicode code points, matched as
// their UTF-8 bytes; kBytes matches raw byte ranges (for lexemes that are not text).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::grammar {

struct CodeRange {
  char32_t lo = 0;
  char32_t hi = 0;  // inclusive
};

struct RegexNode;
using RegexPtr = std::shared_ptr<const RegexNode>;

struct RegexNode {
  enum class Kind : uint8_t { kEmpty, kChars, kBytes, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  std::vector<CodeRange> ranges;   // kChars: sorted, merged code point ranges; kBytes: byte ranges
  std::vector<RegexPtr> children;  // kConcat, kAlt: the parts; kRepeat: one child
  int min = 0;                     // kRepeat
  int max = -1;                    // kRepeat; -1 = unbounded
};

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

// The text front ends' limits (GBNF, regex): groups ( ) nested at most kMaxGroupDepth deep and
// repetition counts {m,n} at most kMaxRepeatCount, so that a hostile pattern neither exhausts the
// parser's stack nor expands into a grammar too large to build. Each front end names the limit in
// its error ("groups nested too deeply", "repetition count above 10000").
inline constexpr int kMaxGroupDepth = 200;
inline constexpr int kMaxRepeatCount = 10000;

RegexPtr re_empty();
// A set of code points (sorted and merged here; surrogates are dropped when matched as UTF-8).
// An empty set matches nothing.
RegexPtr re_chars(std::vector<CodeRange> ranges);
RegexPtr re_char(char32_t c);
RegexPtr re_bytes(uint8_t lo, uint8_t hi);
// The UTF-8 text matched literally.
RegexPtr re_literal(std::string_view utf8);
RegexPtr re_concat(std::vector<RegexPtr> parts);
RegexPtr re_alt(std::vector<RegexPtr> parts);
RegexPtr re_repeat(RegexPtr child, int min, int max);
RegexPtr re_optional(RegexPtr child);
RegexPtr re_any_char();  // every code point

// Sorted, merged ranges; complement within [0, kMaxCodePoint].
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges);
std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges);

// A canonical text form (equal trees give equal keys): lexemes are interned by it.
std::string regex_key(const RegexNode& node);
// True when the expression matches the empty string.
bool regex_nullable(const RegexNode& node);

// Decodes the code point at text[pos], advancing pos; false for invalid UTF-8.
bool next_utf8(std::string_view text, size_t& pos, char32_t& c);

}  // namespace spindle::grammar
