// How far a lexer state is sure to survive inside JSON-string-like text: the largest n such that
// every string of at most n characters, each a character a JSON string holds unescaped (not '"',
// '\\', U+0000-U+001F or U+007F; any other well-formed UTF-8 character), leaves the DFA alive.
// The masks use it to allow whole vocabulary slices (TokenizerInfo) without walking their tries.
//
// For a DFA state the answer is exact when the breadth-first search over the states reachable
// by 1, 2, ... such characters stays small; otherwise a lower bound (the best of the search and
// of each NFA state of the set alone: a set survives wherever one of its members does). A lower
// bound only costs speed, never a wrong mask.
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

  StringHorizon(LexerDfa& dfa, int cap) : dfa_(dfa), cap_(cap) {}

  // min(horizon of DFA state s, cap), or kUnbounded when every such string of any length keeps
  // s alive.
  int of(int32_t s);
  // After of(s): the number of lengths 0, 1, ... (at most cap + 1) for which every state
  // reached from s by such a string of that length is not accepting and dies on every control
  // byte (U+0000-U+001F): a token of fewer such characters, then a control byte, is
  // rejected there without ending a lexeme.
  int control_dead_of(int32_t s);

 private:
  // Bounds on one of(): states per frontier, DFA states built (past them: a lower bound).
  static constexpr size_t kMaxFrontier = 32;
  static constexpr size_t kMaxNewStates = 256;
  // A search from s alone; exact is false when it stopped at a bound. control_dead: as
  // control_dead_of, over the levels searched.
  int search(int32_t s, bool& exact, int* control_dead = nullptr);
  bool control_dead_state(int32_t s);
  // The states after one such character from s (sorted, unique), or false when one dies.
  bool successors(int32_t s, std::vector<int32_t>& out);

  LexerDfa& dfa_;
  int cap_;
  size_t budget_end_ = 0;
  std::vector<int32_t> memo_;       // [DFA states] horizon + 1, 0 = unknown
  std::vector<int32_t> control_memo_;  // [DFA states] control_dead_of, set with memo_
  std::vector<int32_t> nfa_memo_;   // [NFA states] horizon + 1 of the state alone, 0 = unknown
  std::vector<int32_t> succ_begin_;  // [DFA states] offset into succ_ + 1; 0 unknown, -1 dies
  std::vector<int32_t> succ_;        // per known state: count, then the states
};

}  // namespace spindle::grammar
