// A grammar armed lazily: unconstrained until a trigger appears in the output (a trigger token
// id, or a trigger string anywhere in the decoded bytes: a tool-call opening tag, "</think>"),
// constrained by the grammar from there on. A string trigger is part of the constrained text
// (the grammar must start with it); a token trigger is not (the grammar starts after it).
//
// Unarmed, every token is allowed (the mask is all ones); a token that completes a trigger but
// carries bytes the grammar refuses is refused by accept_token (the caller samples again).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace spindle::grammar {

class LazyMatcher {
 public:
  // grammar: a matcher at the grammar's start (it is forked when armed).
  LazyMatcher(Matcher grammar, std::vector<std::string> trigger_strings, std::vector<TokenId> trigger_tokens);

  bool armed() const { return armed_.has_value(); }
  bool accept_token(TokenId id);
  void rollback(int n);
  int num_tokens() const { return static_cast<int>(history_.size()); }
  // Unarmed: all ones over the vocabulary; armed: the grammar's mask.
  void fill_mask(std::span<uint32_t> mask);
  // Unarmed: true (generation may end anywhere); armed: the grammar's completeness.
  bool is_complete();

 private:
  struct Step {
    size_t text_before;  // unarmed bytes before this token
    bool armed_here;     // this token armed the grammar
    bool while_armed;    // this token went to the armed matcher
  };

  Matcher base_;
  std::optional<Matcher> armed_;
  std::vector<std::string> strings_;
  std::vector<TokenId> tokens_;
  std::string text_;  // the output's bytes while unarmed
  std::vector<Step> history_;
};

}  // namespace spindle::grammar
