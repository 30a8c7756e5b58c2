// The matcher: one generation's position in a compiled grammar, advanced by tokens (or bytes),
// rolled back by whole tokens, asked for the token mask, for completion and for the forced
// continuation (jump-forward).
//
// State: the Earley chart over lexemes plus the lexer's DFA state inside the current lexeme.
// Masks walk the tokenizer's trie: inside a lexeme each trie edge is one cached DFA transition;
// the parser is consulted only where a lexeme ends. For each lexer state the tokens that stay
// inside the lexeme (`within`) and the trie nodes where it may end (`exits`) are cached, so a
// repeated state costs one bitmask copy plus the walk below its exits.
//
// Not thread-safe. Matchers made by fork() share the lazily built DFA and mask caches, so a
// family of forks belongs to one thread; a Matcher built from the CompiledGrammar has its own.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/earley_chart.h"
#include "grammar/grammar.h"
#include "grammar/lexer.h"
#include "grammar/vocabulary.h"

namespace spindle::grammar {

class MatcherCache;

class Matcher {
 public:
  Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const TokenizerInfo> tokenizer);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  // A copy of this state that shares the caches (same thread only).
  Matcher fork() const;

  // Advances by one token; false (state unchanged) when the grammar does not allow it. An EOS
  // id is accepted when the grammar is complete and ends the matcher (is_terminated()).
  bool accept_token(TokenId id);
  // Advances by raw bytes as one step of the history (rollback counts it as one token).
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted tokens (n <= num_tokens()).
  void rollback(int n);
  int num_tokens() const { return static_cast<int>(history_.size()); }

  // The bytes so far form a whole document (EOS may follow).
  bool is_complete();
  // Complete, and no byte can follow: only EOS is allowed.
  bool can_only_end();
  bool is_terminated() const { return terminated_; }

  // mask: [ceil(vocab_size / 32)] words; bit (id % 32) of word id / 32 is set when id is
  // allowed next. EOS ids are allowed exactly when is_complete(); special ids never are, but
  // for the grammar's allowed special tokens (Grammar::allow_special_token), judged by their text.
  void fill_mask(std::span<uint32_t> mask);
  // The bytes token `id` stands for in this grammar: its grammar_bytes, an allowed special
  // token's text, or nullptr (never matches).
  const std::string* token_bytes(TokenId id) const;
  // The longest byte string that is the only allowed continuation (empty when there is a
  // choice or the document may end here); at most max_bytes long.
  std::string forced_bytes(size_t max_bytes = 256);
  // The bytes allowed next.
  std::bitset<256> allowed_bytes();

  const TokenizerInfo& tokenizer() const { return *tok_; }

 private:
  Matcher(const Matcher& other);  // fork

  struct Snapshot {
    uint32_t num_sets;
    uint32_t set;
    int32_t lex;
    bool terminated;
    bool started;
  };
  struct Frame {
    int32_t lex;
    uint32_t set;
  };

  int32_t lexer_start(uint32_t set);
  // Advances (set, lex) by b; false when not allowed. memo: reuse scans made earlier in this
  // mask computation (their sets stay until the chart is truncated).
  bool step(uint32_t& set, int32_t& lex, uint8_t b, bool memo);
  // started: some byte was consumed (else an empty document may be complete).
  bool complete_at(uint32_t set, int32_t lex, bool started);
  // Sets the bits of the tokens allowed from (set, lex) (the mask starts cleared).
  void fill_from(uint32_t set, int32_t lex, uint32_t* mask);
  // The chart set after the lexeme(s) lex accepts, scanned from set (memoized until the mask
  // computation ends); -1 when the parser takes none of them.
  int32_t scan_from(uint32_t set, int32_t lex);
  void walk_subtree(const TokenTrie& trie, uint32_t root, Frame parent, uint32_t* mask);
  void restore(const Snapshot& s);

  std::shared_ptr<const CompiledGrammar> g_;
  std::shared_ptr<const TokenizerInfo> tok_;
  std::shared_ptr<MatcherCache> cache_;
  EarleyChart chart_;
  std::vector<int32_t> set_start_;  // [sets] lexer start state, -1 = not computed
  uint32_t set_ = 0;
  int32_t lex_ = 0;
  bool terminated_ = false;
  bool started_ = false;
  std::vector<Snapshot> history_;
  std::unordered_map<uint64_t, int32_t> scan_memo_;
  std::vector<TokenTrie::WalkCursor<Frame>> frames_;
  std::vector<TokenTrie::WalkCursor<int32_t>> walk_state_;
};

}  // namespace spindle::grammar
