// Structured output in the engine (grammar/ does the matching): a request's matcher and mask
// scratch, the engine thread's root matchers (one per compiled grammar; a request's matcher is a
// fork of its grammar's root, so requests with the same grammar share the lazily built DFA and
// mask caches), and the stop policy of a grammar.
//
// Threads: a matcher family belongs to one thread; everything here but GrammarTokenizer is
// touched by the engine thread only.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "engine/stop_policy.h"
#include "grammar/lazy_matcher.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace spindle::engine {

// The grammar's view of the engine's tokenizer (grammar::TokenizerInfo: decoded bytes per id, the
// trie, special and EOS ids), built once, on the first thread that asks (the HTTP work pool that
// submits the first constrained request: 0.8-1 s for a 128k vocabulary, never on the engine
// thread). Thread-safe.
class GrammarTokenizer {
 public:
  // eos_ids: the model's end-of-sequence ids (they join the tokenizer's); vocab_size: the width of
  // a logit row (the masks' width). Borrows the tokenizer.
  GrammarTokenizer(const tokenizer::Tokenizer& tokenizer, std::vector<TokenId> eos_ids, int vocab_size);
  std::shared_ptr<const grammar::TokenizerInfo> get() const;

 private:
  const tokenizer::Tokenizer& tokenizer_;
  std::vector<TokenId> eos_ids_;
  int vocab_size_;
  mutable std::once_flag once_;
  mutable std::shared_ptr<const grammar::TokenizerInfo> info_;
};

// One request's position in its grammar: a matcher constrained from the first token, or one armed
// lazily (SamplingParams::grammar_arming: a tool call's marker, the end of a reasoning section).
class GrammarState {
 public:
  // arming: null, the grammar applies from the first token.
  GrammarState(grammar::Matcher m, const grammar::LazyArming* arming);

  // Advances by a drawn token; false (state unchanged) when the grammar refuses it.
  bool accept_token(TokenId id);
  // The grammar accepted an EOS id / nothing but EOS may follow (never while lazily unarmed).
  bool is_terminated() const;
  bool can_only_end();
  bool armed() const { return !lazy_ || lazy_->armed(); }

  // The tokens allowed next (EOS ids exactly when the document may end), into `mask`; returns it.
  std::span<const uint32_t> fill_mask();
  // Whether `mask` (as last filled) allows any token.
  bool mask_allows_any() const;

  // Speculative decoding (engine/speculative/). How many leading tokens of `draft` the grammar
  // accepts, one after the other (the state is unchanged: they are rolled back).
  int num_allowed_drafts(std::span<const TokenId> draft);
  // The mask of verify row `row` (the token after draft[0..row)), or an empty span where it allows
  // no token (the sampler then draws unconstrained and the matcher refuses the draw: see
  // OutputProcessor::accept_token). Advances the matcher by the drafts before the row, which it
  // must accept (num_allowed_drafts); rows are asked in increasing order between two
  // end_verify() calls, which roll the advance back.
  std::span<const uint32_t> draft_row_mask(std::span<const TokenId> draft, size_t row);
  void end_verify();

  // Jump-forward: draft tokens for the one byte string the grammar allows next (the matcher's
  // forced continuation, cut after its last whole UTF-8 character), at most max_tokens; empty when
  // there is a choice, while a lazy grammar is unarmed (LazyMatcher has no forced continuation),
  // or where the tokenizer's first token of it is one the grammar refuses.
  //
  // Tokenization: `tokenizer` encodes the forced bytes alone as a continuation of the text
  // (Tokenizer::encode_continuation: no special tokens, no dummy-prefix "▁" of a Metaspace or SPM
  // tokenizer), starting at the current token boundary (the output so far is fixed); the tokens
  // are kept up to the first the grammar refuses.
  // This is a guess, never an output: the verify step keeps a draft only where the model's own draw
  // equals it, so outputs are those of decoding without drafts. Where the model would tokenize
  // differently (its last token merged with what follows, `":` against `": "`) the draft is
  // rejected at that position and the model's own token is emitted there in the same step; a
  // rejected draft costs its query position, never a step nor a changed token.
  std::vector<TokenId> forced_tokens(const tokenizer::Tokenizer& tokenizer, int max_tokens);

  static constexpr size_t kMaxForcedBytes = 256;

 private:
  bool accept(TokenId id);
  void rollback(int n);

  std::optional<grammar::Matcher> matcher_;
  std::optional<grammar::LazyMatcher> lazy_;
  std::vector<uint32_t> mask_;  // [ceil(vocab / 32)] the last fill_mask()
  int num_verify_advanced_ = 0;  // drafts accepted by draft_row_mask since end_verify()
};

// The root matchers of the engine thread, by compiled grammar, the least recently used dropped
// beyond `capacity`.
class GrammarMatchers {
 public:
  explicit GrammarMatchers(size_t capacity = 64) : capacity_(capacity) {}
  // A matcher at the grammar's start, forked from its root.
  grammar::Matcher start(const std::shared_ptr<const grammar::CompiledGrammar>& grammar,
                         const std::shared_ptr<const grammar::TokenizerInfo>& tokenizer);
  size_t size() const { return roots_.size(); }

 private:
  struct Root {
    const grammar::CompiledGrammar* key;
    const grammar::TokenizerInfo* tokenizer;
    grammar::Matcher matcher;
  };
  size_t capacity_;
  std::list<Root> roots_;  // most recently used first
};

// Ends a constrained request where its grammar does (the matcher was advanced by the token
// already, OutputProcessor::accept_token): an end-of-sequence id the grammar accepted ends it
// before the token's text; a document after which only end-of-sequence may follow ends it after
// the token's text (even with ignore_eos). Both with finish reason "stop".
class GrammarStopPolicy final : public StopPolicy {
 public:
  // slot: the request's RequestOutputState::grammar (filled on the engine thread before the first
  // token; it outlives the policy).
  explicit GrammarStopPolicy(const std::unique_ptr<GrammarState>& slot) : slot_(slot) {}
  StopVerdict check_token(const Request& request, TokenId token) override;

 private:
  const std::unique_ptr<GrammarState>& slot_;
};

}  // namespace spindle::engine
