// A grammar armed lazily: unconstrained until a trigger appears in the output (a trigger token
// id, or a trigger string anywhere in the decoded bytes: a tool-call opening tag), or until the
// output's content begins (after a reasoning section: "</think>"), constrained by the grammar
// from there on. A string trigger is part of the constrained text (the grammar must start with
// it); a token trigger is not (the grammar starts after it); armed at the content, the grammar
// reads the content from its first byte. The grammar's allowed special tokens
// (Grammar::allow_special_token) count as their text everywhere here, so a trigger string that
// is a control token in one vocabulary ("[TOOL_CALLS]") arms on that token as on its spelling.
//
// A free section (a reasoning model's `<think>...</think>`): triggers found inside it do not
// count. The section is open from the output's start when the prompt opened it; otherwise it
// opens only when the output begins (after whitespace) with its opening marker, and any other
// first non-whitespace byte starts the content (chat/reasoning_parser.h sorts text the same way).
// Arming at the content, whitespace before that choice is allowed as far as the grammar allows it
// at its start, and special tokens not at all (else a model could write them forever without
// choosing).
//
// Unarmed, the mask allows exactly the tokens accept_token() accepts: every token but those that
// complete a trigger (or the section's end, when arming at the content) followed by bytes the
// grammar refuses, and EOS ids unless the arming is required. Finding those tokens reads a table
// of the tokens that hold or begin a marker, built from the vocabulary on the first mask
// (O(vocabulary bytes), about 2 ms for 150k tokens).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace spindle::grammar {

// When a lazily armed grammar arms (at least one trigger, or at_content).
struct LazyArming {
  std::vector<std::string> trigger_strings;  // each non-empty
  std::vector<TokenId> trigger_tokens;
  // The free section (both empty: none): its markers, and whether the prompt opened it.
  std::string section_open;
  std::string section_close;
  bool section_opened = false;
  // Arm where the content starts (after the section, or at the output's start without one).
  bool at_content = false;
  // The output may not end unarmed: EOS ids are refused until the grammar is armed.
  bool required = false;
};

class LazyMatcher {
 public:
  // grammar: a matcher at the grammar's start (it is forked when armed). Throws spindle::Error
  // when the arming has no trigger and is not at_content, or a marker is empty.
  LazyMatcher(Matcher grammar, LazyArming arming);
  LazyMatcher(Matcher grammar, std::vector<std::string> trigger_strings, std::vector<TokenId> trigger_tokens);

  bool armed() const { return armed_.has_value(); }
  // False (state unchanged) when the token is refused: see the mask above.
  bool accept_token(TokenId id);
  void rollback(int n);
  int num_tokens() const { return static_cast<int>(history_.size()); }
  // Unarmed: the tokens accept_token() accepts; armed: the grammar's mask.
  void fill_mask(std::span<uint32_t> mask);
  // Unarmed: true unless required (generation may end anywhere); armed: the grammar's completeness.
  bool is_complete();
  // Armed and the grammar accepted an EOS id / can only end (false while unarmed).
  bool is_terminated() const { return armed_ && armed_->is_terminated(); }
  bool can_only_end() { return armed_ && armed_->can_only_end(); }

 private:
  enum class Phase : uint8_t { kStart, kSection, kContent };
  // Where the unarmed text stands: the phase, where the section's text starts (kSection) and
  // where the content starts (kContent: triggers are searched from there).
  struct Position {
    Phase phase = Phase::kContent;
    size_t section_from = 0;
    size_t content_from = 0;
  };
  struct Step {
    size_t text_before;  // unarmed bytes before this token
    Position position;   // before this token
    bool armed_here;     // this token armed the grammar
    bool while_armed;    // this token went to the armed matcher
  };
  // Tokens holding a marker, or beginning with its tail: [marker] -> ids.
  struct MarkerTokens {
    std::vector<TokenId> containing;
    std::vector<std::vector<TokenId>> starting_with_tail;  // [k]: tokens starting with marker[k..], 0 < k
  };

  // The unarmed path of accept_token; commit false: only whether it would be accepted.
  bool advance_unarmed(TokenId id, bool commit);
  // Moves the position over text_ (new bytes from `before`); returns where the grammar arms in
  // text_ (npos: not armed).
  size_t locate(Position& pos, size_t before) const;
  void build_marker_tokens();
  // Tokens that might be refused now (every other token is accepted).
  std::vector<TokenId> risky_tokens() const;
  void add_marker_candidates(size_t marker, size_t from, std::vector<TokenId>& out) const;

  Matcher base_;
  LazyArming arming_;
  std::optional<Matcher> armed_;
  std::string text_;  // the output's bytes while unarmed
  Position pos_;
  std::vector<Step> history_;
  std::vector<std::string> markers_;  // the trigger strings, then the section's close
  std::vector<MarkerTokens> marker_tokens_;  // [markers_], built on the first fill_mask
};

}  // namespace spindle::grammar
