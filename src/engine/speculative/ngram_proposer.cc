#include "engine/speculative/ngram_proposer.h"

#include <algorithm>

#include "util/error.h"

namespace spindle::engine::speculative {

std::vector<TokenId> ngram_lookup(std::span<const TokenId> context, int min_window, int max_window, int max_tokens) {
  return ngram_match(context, min_window, max_window, max_tokens).tokens;
}

NgramMatch ngram_match(std::span<const TokenId> context, int min_window, int max_window, int max_tokens) {
  const int length = static_cast<int>(context.size());
  if (max_tokens <= 0) return {};
  for (int n = std::min(max_window, length - 1); n >= min_window; --n) {
    const TokenId* suffix = context.data() + (length - n);
    // The most recent earlier occurrence [start, start + n) with at least one token after it
    // (start + n <= length - 1), excluding the suffix itself.
    for (int start = length - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, context.data() + start)) continue;
      const int from = start + n;
      const int to = std::min(length, from + max_tokens);
      return {std::vector<TokenId>(context.begin() + from, context.begin() + to), n};
    }
  }
  return {};
}

NgramProposer::NgramProposer(int min_window, int max_window) : min_window_(min_window), max_window_(max_window) {
  SPINDLE_CHECK(min_window >= 1 && min_window <= max_window, "ngram windows [{}, {}]: expected 1 <= min <= max",
                min_window, max_window);
}

void NgramProposer::propose(std::span<const ProposalRequest> requests) {
  for (const ProposalRequest& p : requests) {
    const Request& r = *p.request;
    context_.assign(r.prompt.begin(), r.prompt.end());
    context_.insert(context_.end(), r.output.begin(), r.output.end());
    NgramMatch m = ngram_match(context_, min_window_, max_window_, p.max_draft_tokens);
    p.out->tokens = std::move(m.tokens);
    p.out->match_length = m.length;
  }
}

}  // namespace spindle::engine::speculative
