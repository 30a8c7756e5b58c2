// tokenizer.json "added_tokens": matched in the raw text before normalization and
// pre-tokenization, leftmost first and longest at a position.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"

namespace spindle::tokenizer {

struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;       // the match swallows (Unicode) whitespace on its left
  bool rstrip = false;       // the match swallows (Unicode) whitespace on its right
  bool single_word = false;  // matches only when not inside a word (ASCII letters/digits/_)
  // HF matches normalized=true tokens against normalized text; Spindle matches every added
  // token against the raw text (identical for the supported normalizers unless the token
  // content itself contains text the normalizer rewrites).
  bool normalized = false;
};

// A piece of the input: plain text (id < 0) or one added token.
struct Segment {
  std::string_view text;
  TokenId id = -1;
  size_t offset = 0;  // byte offset of text in the input
};

// How overlapping candidates are resolved.
//   kLeftmostLongest: HF tokenizers — scan left to right, at each position the longest token.
//   kLongestFirst: llama.cpp (tokenizer_st_partition) — the longest token (ties: lower id) is
//     cut out of every plain-text piece first, then the next longest from what remains.
enum class MatchOrder : uint8_t { kLeftmostLongest, kLongestFirst };

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens,
                             MatchOrder order = MatchOrder::kLeftmostLongest);

  // Cuts text into plain-text segments (never empty) and added-token segments.
  // match_special = false leaves tokens marked special in the text (llama.cpp's
  // parse_special = false; non-special added tokens still match).
  std::vector<Segment> split(std::string_view text, bool match_special = true) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Length of the token matched at text[pos] (its index in `index`), or 0.
  size_t match_at(std::string_view text, size_t pos, bool match_special, size_t& index) const;
  std::vector<Segment> split_longest_first(std::string_view text, bool match_special) const;


  std::vector<AddedToken> tokens_;
  MatchOrder order_ = MatchOrder::kLeftmostLongest;
  std::vector<uint32_t> by_length_;  // indices, longest content first, then lower id
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices, longest content first
};

}  // namespace spindle::tokenizer
