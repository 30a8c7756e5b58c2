// The lexer: every lexeme of a grammar compiled into one byte-level NFA (Thompson construction
// over the UTF-8 encodings of the lexemes' code point sets), and a DFA over it built lazily, one
// transition at a time, as matching and mask computation ask for it.
//
// A DFA state is a set of NFA states (of the lexemes the parser allows at that point), so one
// DFA serves every parser state: the parser only chooses the start state.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/regex_ast.h"

namespace spindle::grammar {

// Bounds on what compiling one grammar may cost; past them compilation throws spindle::Error.
struct CompileLimits {
  size_t max_nfa_states = 1'000'000;
  size_t max_dfa_states = 100'000;  // lazily built states per matcher cache (each 1 KiB)
  size_t max_rules = 200'000;
  double max_seconds = 5.0;         // wall time of one compilation
};

class Nfa {
 public:
  struct Edge {
    uint8_t lo = 0;
    uint8_t hi = 0;
    uint32_t to = 0;
  };

  explicit Nfa(size_t max_states) : max_states_(max_states) {}

  // Compiles re for lexeme `lexeme`; its start state is lexeme_start(lexeme).
  void add_lexeme(const RegexNode& re, int lexeme);
  // Drops every state that cannot reach an accepting state and packs the edges. Call once,
  // after the last add_lexeme.
  void finalize();

  size_t num_states() const { return accept_.size(); }
  uint32_t lexeme_start(int lexeme) const { return starts_[static_cast<size_t>(lexeme)]; }
  int accept_lexeme(uint32_t state) const { return accept_[state]; }  // -1 when none
  // The lexeme whose automaton state s is (each lexeme's states are its own).
  int owner(uint32_t state) const { return owner_[state]; }
  std::span<const Edge> edges(uint32_t s) const {
    return {edges_.data() + edge_begin_[s], edges_.data() + edge_begin_[s + 1]};
  }
  std::span<const uint32_t> eps(uint32_t s) const {
    return {eps_.data() + eps_begin_[s], eps_.data() + eps_begin_[s + 1]};
  }
  bool live(uint32_t s) const { return live_[s] != 0; }

 private:
  struct Fragment {
    uint32_t start;
    uint32_t end;
  };
  uint32_t new_state();
  Fragment build(const RegexNode& re);
  Fragment build_chars(const std::vector<CodeRange>& ranges);
  Fragment build_repeat(const RegexNode& re);
  void add_byte_path(uint32_t from, uint32_t to, const uint8_t* lo, const uint8_t* hi, int len);
  void eps(uint32_t from, uint32_t to) { build_eps_.push_back({from, to}); }
  void edge(uint32_t from, uint8_t lo, uint8_t hi, uint32_t to) { build_edges_.push_back({from, Edge{lo, hi, to}}); }

  size_t max_states_;
  // While building: edges and epsilon moves as (from, ...) lists, packed by finalize().
  std::vector<std::pair<uint32_t, Edge>> build_edges_;
  std::vector<std::pair<uint32_t, uint32_t>> build_eps_;
  std::vector<int> accept_;
  std::vector<int> owner_;  // [states] the lexeme each state was built for
  std::vector<uint32_t> starts_;
  std::vector<uint8_t> live_;
  std::vector<uint32_t> edge_begin_, eps_begin_;
  std::vector<Edge> edges_;
  std::vector<uint32_t> eps_;
};

// The lazily built DFA. Not thread-safe: one per matcher family (see Matcher).
class LexerDfa {
 public:
  static constexpr int32_t kDead = 0;

  LexerDfa(const Nfa& nfa, size_t max_states);

  // The state where the given lexemes (sorted, unique) begin.
  int32_t start(std::span<const int> lexemes);
  int32_t next(int32_t s, uint8_t b) {
    const int32_t t = trans_[static_cast<size_t>(s) * num_classes_ + byte_class_[b]];
    return t >= 0 ? t : compute(s, b);
  }
  // Bytes of one class (no NFA edge starts or ends inside a class) lead every state to the same
  // state; a DFA row holds one entry per class.
  size_t num_classes() const { return num_classes_; }
  // The lexemes that end at s (sorted).
  std::span<const int> accepts(int32_t s) const { return accepts_[static_cast<size_t>(s)]; }
  bool accepting(int32_t s) const { return !accepts_[static_cast<size_t>(s)].empty(); }
  size_t num_states() const { return sets_.size(); }
  const Nfa& nfa() const { return nfa_; }
  // The NFA states of DFA state s (those with byte edges or an accept, sorted).
  std::span<const uint32_t> nfa_states(int32_t s) const { return sets_[static_cast<size_t>(s)]; }
  // No byte continues the lexeme(s) of s (s is dead or only ends lexemes).
  bool dead_end(int32_t s) const {
    for (uint32_t x : sets_[static_cast<size_t>(s)]) {
      if (!nfa_.edges(x).empty()) return false;
    }
    return true;
  }
  // The DFA state of NFA state x alone (with its epsilon closure); kDead when x has no future.
  int32_t state_of(uint32_t x);
  // The DFA state of the NFA states of s that belong to `lexeme` (a set closed under epsilon
  // moves stays closed: no move leaves its lexeme); kDead when none does.
  int32_t part_of(int32_t s, int lexeme);
  // Appends to out the DFA states reached from s by each well-formed multi-byte UTF-8
  // character (U+0080-U+10FFFF but surrogates); false when one of them leads nowhere. Works on
  // NFA state sets, so the states in the middle of a character are never built.
  bool utf8_char_targets(int32_t s, std::vector<int32_t>& out);
  // next(s, b) == s for every byte b set in bytes (256 bits); builds only the transitions it
  // reads, stopping at the first byte that leaves s.
  bool loops_on(int32_t s, const std::array<uint64_t, 4>& bytes) {
    for (size_t w = 0; w < 4; ++w) {
      for (uint64_t x = bytes[w]; x != 0; x &= x - 1) {
        if (next(s, static_cast<uint8_t>(w * 64 + static_cast<size_t>(std::countr_zero(x)))) != s) return false;
      }
    }
    return true;
  }
  // The bytes b with next(s, b) == s (256 bits), computed on first use (the whole row).
  const std::array<uint64_t, 4>& loop_bytes(int32_t s) {
    const auto i = static_cast<size_t>(s);
    return i < loops_known_.size() && loops_known_[i] ? loops_[i] : compute_loop_bytes(s);
  }

 private:
  int32_t compute(int32_t s, uint8_t b);
  const std::array<uint64_t, 4>& compute_loop_bytes(int32_t s);
  int32_t intern(std::vector<uint32_t>& states);  // states: closure, any order
  // Advances the NFA set `from` over every byte of [ranges[0].first, ranges[0].second], then
  // the next range, ...; appends the DFA states at the end to out. False when a path dies.
  bool advance_ranges(const std::vector<uint32_t>& from, std::span<const std::pair<uint8_t, uint8_t>> ranges,
                      std::vector<int32_t>& out);
  void closure(std::vector<uint32_t>& states);
  // The states with byte edges or an accept in x's epsilon closure (sorted), computed once.
  std::span<const uint32_t> important_closure(uint32_t x);
  // out = the important states reached from `from` by byte b (sorted, unique).
  void move_on(std::span<const uint32_t> from, uint8_t b, std::vector<uint32_t>& out);
  // intern() of a sorted set of important states (no copy when the state exists).
  int32_t intern_sorted(const std::vector<uint32_t>& states);

  const Nfa& nfa_;
  size_t max_states_;
  std::array<uint8_t, 256> byte_class_{};
  std::array<uint8_t, 256> class_rep_{};  // [classes] the first byte of each class
  size_t num_classes_ = 0;
  std::vector<int32_t> trans_;  // [num_states, num_classes_], -1 = not built yet
  std::vector<uint32_t> scratch_;  // compute's NFA set
  std::vector<std::vector<uint32_t>> sets_;
  std::vector<std::vector<int>> accepts_;
  // Keyed by a state's sorted NFA set (as bytes), looked up without a copy.
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view k) const { return std::hash<std::string_view>()(k); }
  };
  std::unordered_map<std::string, int32_t, KeyHash, std::equal_to<>> index_;
  std::unordered_map<std::string, int32_t> start_index_;
  std::vector<uint8_t> mark_;  // [nfa states] scratch for closure and move_on
  std::vector<uint8_t> in_out_;        // [nfa states] scratch for move_on
  std::vector<uint32_t> closure_at_;    // [nfa states] offset + 1 into closure_pool_, 0 = not yet
  std::vector<uint32_t> closure_pool_;  // per computed state: count, then the states
  std::vector<std::array<uint64_t, 4>> loops_;
  std::vector<uint8_t> loops_known_;
};

}  // namespace spindle::grammar
