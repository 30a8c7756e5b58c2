// What the grammar engine knows of a tokenizer: each token id's decoded bytes, which ids are
// special/control (never matching grammar bytes) and which end generation. Built once per
// tokenizer (with the trie the masks walk) and shared, read-only, by every matcher.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/token_trie.h"
#include "util/token_id.h"

namespace spindle::grammar {

struct Vocabulary {
  // [vocab_size] the bytes the tokenizer's decoder emits for each id (SentencePiece '▁' as a
  // space, <0xNN> as the byte, partial UTF-8 kept as bytes; a special id's text). Ids past the
  // end, empty strings and special ids never match grammar bytes (a grammar's allowed special
  // tokens excepted: Grammar::allow_special_token).
  std::vector<std::string> token_bytes;
  std::vector<uint8_t> special;  // [vocab_size] 1 for special / control tokens
  std::vector<TokenId> eos_ids;  // allowed exactly when the grammar may end
  int32_t vocab_size = 0;        // the mask's width (>= token_bytes.size(), e.g. padded logits)
};

// What the masks walk: the vocabulary's tokens (those that may match grammar bytes) split into
// disjoint tries. Slice k >= 1 holds the tokens whose bytes are well-formed UTF-8 of
// slice_min_chars(k) .. slice_max_chars(k) characters, each a JSON string character that needs
// no escape (not '"', '\\', U+0000-U+001F or U+007F); trie control_trie() holds the tokens that
// are at most kControlMaxPrefix such characters followed by a control byte (U+0000-U+001F)
// and anything; trie 0 holds every other token. A lexer
// state that stays alive on every such string of up to n characters (inside a JSON string, a
// string with maxLength >= n, a key that may be any string) allows every token of the slices
// with slice_max_chars(k) <= n without a walk: slice_prefix_bits(k) is the union of slices
// 1..k (after llguidance's "slicer").
class TokenizerInfo {
 public:
  explicit TokenizerInfo(Vocabulary vocab);

  const Vocabulary& vocab() const { return vocab_; }
  int32_t vocab_size() const { return vocab_.vocab_size; }
  size_t mask_words() const { return (static_cast<size_t>(vocab_.vocab_size) + 31) / 32; }
  bool is_eos(TokenId id) const;
  // The bytes of a token that may match grammar bytes, or nullptr (special, EOS, unknown, empty).
  const std::string* grammar_bytes(TokenId id) const;
  // The special ids (not EOS) whose text is `text` (usually none or one).
  std::span<const TokenId> special_ids(const std::string& text) const;

  // Trie 0 (the rest), the slices 1..num_slices(), then the control trie.
  const std::vector<TokenTrie>& tries() const { return tries_; }
  int num_slices() const { return static_cast<int>(tries_.size()) - 2; }
  int control_trie() const { return static_cast<int>(tries_.size()) - 1; }
  static constexpr int kControlMaxPrefix = 7;
  // Slice k's character counts; slice_max_chars(num_slices()) is kUnbounded.
  static constexpr int kUnbounded = 1 << 30;
  int slice_min_chars(int k) const { return k == 1 ? 1 : kSliceMaxChars[k - 2] + 1; }
  int slice_max_chars(int k) const { return kSliceMaxChars[k - 1]; }
  // [mask_words()] the tokens of slices 1..k (k >= 1).
  std::span<const uint32_t> slice_prefix_bits(int k) const { return prefix_bits_[static_cast<size_t>(k - 1)]; }
  // Nodes of every trie, and the longest token in bytes.
  size_t num_nodes() const;
  uint16_t max_depth() const;

 private:
  static constexpr int kSliceMaxChars[] = {1, 2, 3, 4, 6, 8, 12, 16, kUnbounded};

  Vocabulary vocab_;
  std::vector<uint8_t> is_eos_;
  std::unordered_map<std::string, std::vector<TokenId>> special_ids_;  // by text
  std::vector<TokenTrie> tries_;
  std::vector<std::vector<uint32_t>> prefix_bits_;
};

}  // namespace spindle::grammar
