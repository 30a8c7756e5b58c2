#include "engine/grammar_state.h"

#include <algorithm>

#include "grammar/tokenizer_vocabulary.h"

namespace spindle::engine {

GrammarTokenizer::GrammarTokenizer(const tokenizer::Tokenizer& tokenizer, std::vector<TokenId> eos_ids, int vocab_size)
    : tokenizer_(tokenizer), eos_ids_(std::move(eos_ids)), vocab_size_(vocab_size) {}

std::shared_ptr<const grammar::TokenizerInfo> GrammarTokenizer::get() const {
  std::call_once(once_, [&] {
    info_ = std::make_shared<const grammar::TokenizerInfo>(
        grammar::vocabulary_from_tokenizer(tokenizer_, eos_ids_, vocab_size_));
  });
  return info_;
}

std::span<const uint32_t> GrammarState::fill_mask() {
  matcher.fill_mask(mask);
  return mask;
}

bool GrammarState::mask_allows_any() const {
  return std::any_of(mask.begin(), mask.end(), [](uint32_t w) { return w != 0; });
}

grammar::Matcher GrammarMatchers::start(const std::shared_ptr<const grammar::CompiledGrammar>& grammar,
                                        const std::shared_ptr<const grammar::TokenizerInfo>& tokenizer) {
  auto it = std::find_if(roots_.begin(), roots_.end(), [&](const Root& r) {
    return r.key == grammar.get() && r.tokenizer == tokenizer.get();
  });
  if (it == roots_.end()) {
    roots_.push_front(Root{grammar.get(), tokenizer.get(), grammar::Matcher(grammar, tokenizer)});
    if (roots_.size() > capacity_) roots_.pop_back();  // its forks keep their own share of the caches
  } else if (it != roots_.begin()) {
    roots_.splice(roots_.begin(), roots_, it);
  }
  return roots_.front().matcher.fork();
}

StopVerdict GrammarStopPolicy::check_token(const Request& /*request*/, TokenId /*token*/) {
  if (!slot_) return {};
  grammar::Matcher& m = slot_->matcher;
  if (m.is_terminated()) return {StopPoint::kBeforeText, FinishReason::kStop};
  if (m.can_only_end()) return {StopPoint::kAfterText, FinishReason::kStop};
  return {};
}

}  // namespace spindle::engine
