// What the grammar engine knows of a tokenizer: each token id's decoded bytes, which ids are
// special/control (never matching grammar bytes) and which end generation. Built once per
// tokenizer (with the trie the masks walk) and shared, read-only, by every matcher.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "util/token_id.h"

namespace spindle::grammar {

struct Vocabulary {
  // [vocab_size] the bytes the tokenizer's decoder emits for each id (SentencePiece '▁' as a
  // space, <0xNN> as the byte, partial UTF-8 kept as bytes). Ids past the end, empty strings
  // and special ids never match grammar bytes.
  std::vector<std::string> token_bytes;
  std::vector<uint8_t> special;  // [vocab_size] 1 for special / control tokens
  std::vector<TokenId> eos_ids;  // allowed exactly when the grammar may end
  int32_t vocab_size = 0;        // the mask's width (>= token_bytes.size(), e.g. padded logits)
};

// The vocabulary's byte strings as a trie in depth-first order: node i's subtree is
// [i, next[i]); node 0 is the root (no byte). Tokens ending at node i are
// tokens[token_begin[i] .. token_begin[i + 1]).
class TokenizerInfo {
 public:
  explicit TokenizerInfo(Vocabulary vocab);

  const Vocabulary& vocab() const { return vocab_; }
  int32_t vocab_size() const { return vocab_.vocab_size; }
  size_t mask_words() const { return (static_cast<size_t>(vocab_.vocab_size) + 31) / 32; }
  bool is_eos(TokenId id) const;
  // The bytes of a token that may match grammar bytes, or nullptr (special, EOS, unknown, empty).
  const std::string* grammar_bytes(TokenId id) const;

  size_t num_nodes() const { return byte_.size(); }
  uint8_t byte(size_t i) const { return byte_[i]; }
  uint16_t depth(size_t i) const { return depth_[i]; }
  uint32_t next(size_t i) const { return next_[i]; }
  std::span<const TokenId> tokens_at(size_t i) const {
    return {tokens_.data() + token_begin_[i], tokens_.data() + token_begin_[i + 1]};
  }
  uint16_t max_depth() const { return max_depth_; }
  // The bytes on every path strictly below node i (256 bits): a lexer state that loops on all of
  // them keeps every token of the subtree inside the lexeme, so the walk can skip it whole.
  const std::array<uint64_t, 4>& bytes_below(size_t i) const { return below_[i]; }
  // Every path strictly below node i, read from a UTF-8 character boundary at node i, is
  // well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), possibly cut
  // short at its end: a lexer state that returns to itself on every non-ASCII character (and on
  // the ASCII bytes below) keeps the whole subtree inside the lexeme.
  bool utf8_below(size_t i) const { return utf8_below_[i] != 0; }
  // [mask_words()] the bits of every token in the trie (those that may match grammar bytes).
  std::span<const uint32_t> trie_token_bits() const { return trie_bits_; }
  // What a mask walk reads of node i, in one 32-byte record (one cache line per visited node).
  struct WalkNode {
    std::array<uint64_t, 2> ascii_below;  // bytes_below(i) below 0x80
    uint32_t next;                        // next(i)
    uint32_t token_begin;                 // token_begin(i)
    uint32_t token_end;                   // token_begin(next(i)): the subtree's tokens end
    uint16_t depth;
    uint8_t byte;
    uint8_t flags;  // kLeaf | kNonAsciiBelow | kUtf8Below
  };
  static constexpr uint8_t kLeaf = 1, kNonAsciiBelow = 2, kUtf8Below = 4;
  const WalkNode& walk_node(size_t i) const { return walk_[i]; }
  // Tokens of node i's whole subtree: tokens()[token_begin(i) .. token_begin(next(i))).
  uint32_t token_begin(size_t i) const { return token_begin_[i]; }
  const std::vector<TokenId>& tokens() const { return tokens_; }

 private:
  void build_utf8_below();

  Vocabulary vocab_;
  std::vector<uint8_t> is_eos_;
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<uint32_t> next_;
  std::vector<uint32_t> token_begin_;
  std::vector<TokenId> tokens_;
  std::vector<std::array<uint64_t, 4>> below_;
  std::vector<uint8_t> utf8_below_;
  std::vector<WalkNode> walk_;
  std::vector<uint32_t> trie_bits_;
  uint16_t max_depth_ = 0;
};

}  // namespace spindle::grammar
