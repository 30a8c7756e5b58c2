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

GrammarState::GrammarState(grammar::Matcher m, const grammar::LazyArming* arming)
    : mask_(m.tokenizer().mask_words()) {
  if (arming != nullptr) {
    lazy_.emplace(std::move(m), *arming);
  } else {
    matcher_.emplace(std::move(m));
  }
}

bool GrammarState::accept_token(TokenId id) { return lazy_ ? lazy_->accept_token(id) : matcher_->accept_token(id); }

bool GrammarState::is_terminated() const { return lazy_ ? lazy_->is_terminated() : matcher_->is_terminated(); }

bool GrammarState::can_only_end() { return lazy_ ? lazy_->can_only_end() : matcher_->can_only_end(); }

std::span<const uint32_t> GrammarState::fill_mask() {
  if (lazy_) {
    lazy_->fill_mask(mask_);
  } else {
    matcher_->fill_mask(mask_);
  }
  return mask_;
}

bool GrammarState::mask_allows_any() const {
  return std::any_of(mask_.begin(), mask_.end(), [](uint32_t w) { return w != 0; });
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
  GrammarState& g = *slot_;
  if (g.is_terminated()) return {StopPoint::kBeforeText, FinishReason::kStop};
  if (g.can_only_end()) return {StopPoint::kAfterText, FinishReason::kStop};
  return {};
}

}  // namespace spindle::engine
