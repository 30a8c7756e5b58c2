#include "grammar/lazy_matcher.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace spindle::grammar {

LazyMatcher::LazyMatcher(Matcher grammar, std::vector<std::string> trigger_strings, std::vector<TokenId> trigger_tokens)
    : base_(std::move(grammar)), strings_(std::move(trigger_strings)), tokens_(std::move(trigger_tokens)) {
  SPINDLE_CHECK(!strings_.empty() || !tokens_.empty(), "a lazily armed grammar needs a trigger");
  for (const std::string& s : strings_) SPINDLE_CHECK(!s.empty(), "empty trigger string");
}

bool LazyMatcher::accept_token(TokenId id) {
  if (armed_) {
    if (!armed_->accept_token(id)) return false;
    history_.push_back({text_.size(), false, true});
    return true;
  }
  const TokenizerInfo& tok = base_.tokenizer();
  if (std::find(tokens_.begin(), tokens_.end(), id) != tokens_.end()) {
    armed_.emplace(base_.fork());
    history_.push_back({text_.size(), true, false});
    return true;
  }
  const size_t before = text_.size();
  if (const std::string* bytes = tok.grammar_bytes(id)) text_ += *bytes;
  // The earliest trigger occurrence that ends inside this token's bytes.
  size_t best = std::string::npos;
  for (const std::string& s : strings_) {
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) best = std::min(best, at);
  }
  if (best == std::string::npos) {
    history_.push_back({before, false, false});
    return true;
  }
  Matcher m = base_.fork();
  if (!m.accept_bytes(std::string_view(text_).substr(best))) {
    text_.resize(before);
    return false;
  }
  armed_.emplace(std::move(m));
  history_.push_back({before, true, false});
  return true;
}

void LazyMatcher::rollback(int n) {
  SPINDLE_CHECK(n >= 0 && n <= num_tokens(), "cannot roll back {} tokens: the matcher has {}", n, num_tokens());
  for (int i = 0; i < n; ++i) {
    const Step s = history_.back();
    history_.pop_back();
    if (s.while_armed) {
      armed_->rollback(1);
    } else if (s.armed_here) {
      armed_.reset();
    }
    text_.resize(s.text_before);
  }
}

void LazyMatcher::fill_mask(std::span<uint32_t> mask) {
  if (armed_) {
    armed_->fill_mask(mask);
    return;
  }
  const TokenizerInfo& tok = base_.tokenizer();
  SPINDLE_CHECK(mask.size() >= tok.mask_words(), "mask has {} words, the vocabulary needs {}", mask.size(),
                tok.mask_words());
  std::memset(mask.data(), 0, mask.size() * sizeof(uint32_t));
  const auto n = static_cast<size_t>(tok.vocab_size());
  for (size_t w = 0; w < n / 32; ++w) mask[w] = ~0u;
  if (n % 32) mask[n / 32] = (1u << (n % 32)) - 1;
}

bool LazyMatcher::is_complete() { return armed_ ? armed_->is_complete() : true; }

}  // namespace spindle::grammar
