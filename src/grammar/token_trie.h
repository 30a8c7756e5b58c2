// A trie over token byte strings, laid out for mask walks: the children of each node are
// contiguous (a sibling group), and the groups are stored in the preorder of their parents, so
// a walk that reads a node's children and skips most of their subtrees reads consecutive records
// (the root's children come first, at 1 .. 1 + num_children(0)). Node 0 is the root (no byte).
// tokens() lists the tokens in byte order, so the tokens of node i's subtree are
// tokens()[token_begin(i) .. token_end(i)), those ending at node i first (tokens_at(i)). A
// TokenizerInfo holds several tries (one per slice of the vocabulary, see vocabulary.h); each is
// read-only once built.
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
  // The tokens whose bytes end at node i.
  std::span<const TokenId> tokens_at(size_t i) const {
    const WalkNode& n = walk_[i];
    const uint32_t end = n.num_children != 0 ? walk_[n.child_begin].token_begin : n.token_end;
    return {tokens_.data() + n.token_begin, tokens_.data() + end};
  }
  // The bytes on every path strictly below node i (256 bits): a lexer state that loops on all of
  // them keeps every token of the subtree inside the lexeme, so the walk can skip it whole.
  const std::array<uint64_t, 4>& bytes_below(size_t i) const { return below_[i]; }
  // [mask words] the bits of this trie's tokens.
  std::span<const uint32_t> token_bits() const { return bits_; }
  const std::vector<TokenId>& tokens() const { return tokens_; }

  // What a mask walk reads of node i, in one 32-byte record (siblings are adjacent records).
  struct WalkNode {
    std::array<uint64_t, 2> ascii_below;  // bytes_below(i) below 0x80
    uint32_t child_begin;                 // the children are [child_begin, child_begin + num_children)
    uint32_t token_begin;                 // tokens of node i (and of its subtree) start here
    uint32_t token_end;                   // the subtree's tokens end here
    uint16_t num_children;
    uint8_t byte;
    // kLeaf: no node below. kNonAsciiBelow: a byte >= 0x80 below. kUtf8Below: every path
    // strictly below, read from a UTF-8 character boundary at node i, is well-formed UTF-8 (no
    // overlong forms, surrogates or code points past U+10FFFF), possibly cut short at its end.
    uint8_t flags;
  };
  static constexpr uint8_t kLeaf = 1, kNonAsciiBelow = 2, kUtf8Below = 4;
  const WalkNode& walk_node(size_t i) const { return walk_[i]; }

  // One level of walk_below's stack.
  template <class State>
  struct WalkCursor {
    uint32_t cur, end;   // the next child to visit and the parent's child end
    State parent_state;  // the state the parent was entered with
  };
  // Depth-first walk of the subtree strictly below node `root`: visit(i, node, parent_state,
  // child_state) is called for each node i reached, with the state its parent was entered with;
  // it returns true to walk i's children with the child_state it wrote. stack: scratch, reused
  // across walks.
  template <class State, class Visit>
  void walk_below(uint32_t root, const State& root_state, std::vector<WalkCursor<State>>& stack, Visit&& visit) const;

 private:
  std::vector<WalkNode> walk_;
  std::vector<TokenId> tokens_;
  std::vector<std::array<uint64_t, 4>> below_;
  std::vector<uint32_t> bits_;
  uint16_t max_depth_ = 0;
};

template <class State, class Visit>
void TokenTrie::walk_below(uint32_t root, const State& root_state, std::vector<WalkCursor<State>>& stack,
                           Visit&& visit) const {
  const WalkNode& r = walk_[root];
  if (r.num_children == 0) return;
  stack.clear();
  stack.push_back({r.child_begin, r.child_begin + r.num_children, root_state});
  State child{};
  while (!stack.empty()) {
    WalkCursor<State>& top = stack.back();
    if (top.cur == top.end) {
      stack.pop_back();
      continue;
    }
    const uint32_t i = top.cur++;
    const WalkNode& n = walk_[i];
    if (visit(i, n, top.parent_state, child) && n.num_children != 0) {
      stack.push_back({n.child_begin, n.child_begin + n.num_children, child});
    }
  }
}

}  // namespace spindle::grammar
