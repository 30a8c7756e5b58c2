// How far a lexer state is sure to survive inside JSON-string-like text: the largest n such that
// every string of at most n characters, each a character a JSON string holds unescaped (not '"',
// '\\', U+0000-U+001F or U+007F; any other well-formed UTF-8 character), leaves the DFA alive.
// The masks use it to allow whole vocabulary slices (TokenizerInfo) without walking their tries.
//
// In the graph whose nodes are DFA states and whose edges are such characters, a string of n + 1
// characters dies exactly when its first n lead to a *fragile* state (one that some character
// kills), so the horizon of s is the distance from s to the nearest fragile state (unbounded
// when none is reachable). A breadth-first search over states finds it, taking the horizons
// already known of the states it meets; it is exact while it stays within its bounds, a lower
// bound past them. A set of NFA states survives wherever one of its parts does, so the best
// part of one lexeme alone (a DFA state of its own, its horizon memoized and shared by every
// set holding it, as a key that may be any string but the declared ones is shared by every key
// position of its object) is a lower bound too: when it reaches kPartEnough characters the set
// itself is not searched. A lower bound only costs speed, never a wrong mask.
//
// Not thread-safe: one per LexerDfa (the matcher family's cache).
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/lexer.h"

namespace spindle::grammar {

class StringHorizon {
 public:
  static constexpr int kUnbounded = 1 << 30;

  // ascii_only: the characters are the one-byte ones only (0x20-0x7E but '"' and '\\'): a
  // state that only some multi-byte characters kill (a pattern's '.' dies on U+2028 and
  // U+2029) may survive every ASCII string.
  StringHorizon(LexerDfa& dfa, int cap, bool ascii_only = false) : dfa_(dfa), cap_(cap), ascii_only_(ascii_only) {}

  // min(horizon of DFA state s, cap), or kUnbounded when every such string of any length keeps
  // s alive.
  int of(int32_t s);
  // Every state reached from s by such a string of at most max_chars characters is not
  // accepting and dies on every control byte (U+0000-U+001F): a token of at most max_chars
  // such characters, then a control byte, is rejected without ending a lexeme. Decided on the
  // NFA: no accepting state and no state with an edge on a control byte is reachable from s's
  // states within 4 * max_chars bytes over epsilon moves and edges on a byte a JSON string
  // character may hold (a superset of those paths, so a true answer is always right). The
  // distances are computed once per grammar, on first use (max_chars < 63 / 4).
  bool controls_die(int32_t s, int max_chars);

 private:
  // Bounds on one of(): states the search visits, DFA states it builds (past them: a lower bound).
  static constexpr size_t kMaxVisited = 512;
  static constexpr size_t kMaxNewStates = 256;
  // A part bound this high is taken without searching the set.
  static constexpr int kPartEnough = 4;
  // The breadth-first search from s (a lower bound past the bounds).
  int search(int32_t s);
  // max over the lexemes of s of the horizon of s's part of that lexeme alone; -1 when s holds
  // one lexeme only (its part is s).
  int part_bound(int32_t s);
  int known(int32_t s) const {
    const auto i = static_cast<size_t>(s);
    return i < memo_.size() ? memo_[i] - 1 : -1;
  }
  // The states after one such character from s (sorted, unique), or false when one dies.
  bool successors(int32_t s, std::vector<int32_t>& out);

  LexerDfa& dfa_;
  int cap_;
  bool ascii_only_;
  size_t budget_end_ = 0;
  std::vector<int32_t> memo_;       // [DFA states] horizon + 1, 0 = unknown
  std::vector<uint32_t> seen_;      // [DFA states] stamp of the search that reached it
  uint32_t stamp_ = 0;
  // [NFA states] bytes to the nearest accepting state or state with a control-byte edge (over
  // epsilon moves and string-byte edges), kFar when none is that close.
  static constexpr uint8_t kFar = 63;
  std::vector<uint8_t> control_dist_;
  void compute_control_distance();
  std::vector<int32_t> succ_begin_;  // [DFA states] offset into succ_ + 1; 0 unknown, -1 dies
  std::vector<int32_t> succ_;        // per known state: count, then the states
};

}  // namespace spindle::grammar
