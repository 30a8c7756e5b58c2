// A trie over token byte strings, laid out depth-first for mask walks: node i's subtree is
// [i, next(i)); node 0 is the root (no byte). Tokens ending at node i are
// tokens()[token_begin(i) .. token_begin(i + 1)). A TokenizerInfo holds several (one per slice of
// the vocabulary, see vocabulary.h); each is read-only once built.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/token_id.h"

namespace spindle::grammar {

class TokenTrie {
 public:
  // ids: the tokens of this trie; token_bytes[id]: their bytes (non-empty); mask_words: the
  // width of token_bits().
  TokenTrie(std::vector<TokenId> ids, const std::vector<std::string>& token_bytes, size_t mask_words);

  size_t num_nodes() const { return walk_.size(); }
  size_t num_tokens() const { return tokens_.size(); }
  uint16_t max_depth() const { return max_depth_; }
  uint8_t byte(size_t i) const { return walk_[i].byte; }
  uint16_t depth(size_t i) const { return walk_[i].depth; }
  uint32_t next(size_t i) const { return walk_[i].next; }
  std::span<const TokenId> tokens_at(size_t i) const {
    const uint32_t end = i + 1 < walk_.size() ? walk_[i + 1].token_begin : static_cast<uint32_t>(tokens_.size());
    return {tokens_.data() + walk_[i].token_begin, tokens_.data() + end};
  }
  // The bytes on every path strictly below node i (256 bits): a lexer state that loops on all of
  // them keeps every token of the subtree inside the lexeme, so the walk can skip it whole.
  const std::array<uint64_t, 4>& bytes_below(size_t i) const { return below_[i]; }
  // [mask words] the bits of this trie's tokens.
  std::span<const uint32_t> token_bits() const { return bits_; }
  const std::vector<TokenId>& tokens() const { return tokens_; }

  // What a mask walk reads of node i, in one 32-byte record (one cache line per visited node).
  struct WalkNode {
    std::array<uint64_t, 2> ascii_below;  // bytes_below(i) below 0x80
    uint32_t next;                        // next(i)
    uint32_t token_begin;                 // tokens of node i (and of its subtree) start here
    uint32_t token_end;                   // token_begin of next(i): the subtree's tokens end
    uint16_t depth;
    uint8_t byte;
    // kLeaf: no node below. kNonAsciiBelow: a byte >= 0x80 below. kUtf8Below: every path
    // strictly below, read from a UTF-8 character boundary at node i, is well-formed UTF-8 (no
    // overlong forms, surrogates or code points past U+10FFFF), possibly cut short at its end.
    uint8_t flags;
  };
  static constexpr uint8_t kLeaf = 1, kNonAsciiBelow = 2, kUtf8Below = 4;
  const WalkNode& walk_node(size_t i) const { return walk_[i]; }

 private:
  std::vector<WalkNode> walk_;
  std::vector<TokenId> tokens_;
  std::vector<std::array<uint64_t, 4>> below_;
  std::vector<uint32_t> bits_;
  uint16_t max_depth_ = 0;
};

}  // namespace spindle::grammar
