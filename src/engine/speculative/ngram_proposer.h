// NgramProposer: prompt lookup decoding. For n from max_window down to min_window, the last n
// tokens of the context (prompt + output) are searched for earlier in the context; at the most
// recent earlier match, the (up to K) tokens that followed it are proposed. No model, no state:
// O(context * n) per request and step. Proposals are deterministic (q is a point mass).
#pragma once

#include <span>
#include <vector>

#include "engine/speculative/proposer.h"

namespace spindle::engine::speculative {

// The lookup itself: up to max_tokens tokens following the most recent earlier occurrence of the
// longest suffix of `context` of length in [min_window, max_window] that occurs earlier; empty
// when none does.
std::vector<TokenId> ngram_lookup(std::span<const TokenId> context, int min_window, int max_window, int max_tokens);

// The same lookup, with the length of the suffix that matched (0 when none did): longer matches
// are accepted more often (kjv-tiny on bench/spec's repeating prompts: about 0.4 of the drafted
// tokens after a 1-token match, 0.7 after 3, 0.8 after 6 or more), so the engine measures the
// acceptance per match length and drafts fewer tokens after short matches.
struct NgramMatch {
  std::vector<TokenId> tokens;
  int length = 0;
};
NgramMatch ngram_match(std::span<const TokenId> context, int min_window, int max_window, int max_tokens);

class NgramProposer final : public Proposer {
 public:
  NgramProposer(int min_window, int max_window);
  const char* name() const override { return "ngram"; }
  bool cheap() const override { return true; }
  void propose(std::span<const ProposalRequest> requests) override;

 private:
  int min_window_;
  int max_window_;
  std::vector<TokenId> context_;  // scratch
};

}  // namespace spindle::engine::speculative
