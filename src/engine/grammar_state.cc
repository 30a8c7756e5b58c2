#include "engine/grammar_state.h"

#include <algorithm>

#include "grammar/tokenizer_vocabulary.h"
#include "util/error.h"

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

bool GrammarState::accept_token(TokenId id) {
  SPINDLE_CHECK(num_verify_advanced_ == 0, "a grammar advanced by a token during a verify (end_verify first)");
  return accept(id);
}

bool GrammarState::accept(TokenId id) { return lazy_ ? lazy_->accept_token(id) : matcher_->accept_token(id); }

void GrammarState::rollback(int n) {
  if (n == 0) return;
  if (lazy_) {
    lazy_->rollback(n);
  } else {
    matcher_->rollback(n);
  }
}

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

int GrammarState::num_allowed_drafts(std::span<const TokenId> draft) {
  int n = 0;
  while (n < static_cast<int>(draft.size()) && !is_terminated() && accept(draft[static_cast<size_t>(n)])) ++n;
  rollback(n);
  return n;
}

std::span<const uint32_t> GrammarState::draft_row_mask(std::span<const TokenId> draft, size_t row) {
  SPINDLE_CHECK(row <= draft.size() && static_cast<int>(row) >= num_verify_advanced_,
                "verify row {} of {} drafts asked after row {}", row, draft.size(), num_verify_advanced_);
  for (; num_verify_advanced_ < static_cast<int>(row); ++num_verify_advanced_) {
    SPINDLE_CHECK(accept(draft[static_cast<size_t>(num_verify_advanced_)]),
                  "verify row {}: the grammar refuses draft {} (token {}); drafts are cut to those it accepts", row,
                  num_verify_advanced_, draft[static_cast<size_t>(num_verify_advanced_)]);
  }
  fill_mask();
  return mask_allows_any() ? std::span<const uint32_t>(mask_) : std::span<const uint32_t>();
}

void GrammarState::end_verify() {
  rollback(num_verify_advanced_);
  num_verify_advanced_ = 0;
}

std::vector<TokenId> GrammarState::forced_tokens(const tokenizer::Tokenizer& tokenizer, int max_tokens) {
  std::vector<TokenId> tokens;
  if (!matcher_ || max_tokens <= 0 || matcher_->is_terminated()) return tokens;
  std::string bytes = matcher_->forced_bytes(kMaxForcedBytes);
  // Inside a character (the output so far ends with its first bytes, e.g. byte tokens): the forced
  // bytes are not text the tokenizer can encode, so no jump-forward this step.
  if (!bytes.empty() && (static_cast<uint8_t>(bytes[0]) & 0xC0) == 0x80) return tokens;
  // Cut after the last whole UTF-8 character (the tokenizer encodes text).
  size_t end = bytes.size(), start = end;
  while (start > 0 && (static_cast<uint8_t>(bytes[start - 1]) & 0xC0) == 0x80) --start;
  if (start > 0) {
    const uint8_t lead = static_cast<uint8_t>(bytes[start - 1]);
    const size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (end - (start - 1) < len) end = start - 1;
  }
  bytes.resize(end);
  if (bytes.empty()) return tokens;
  tokens = tokenizer.encode_continuation(bytes);
  if (static_cast<int>(tokens.size()) > max_tokens) tokens.resize(static_cast<size_t>(max_tokens));
  tokens.resize(static_cast<size_t>(num_allowed_drafts(tokens)));
  return tokens;
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
