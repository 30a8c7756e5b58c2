#include "grammar/lazy_matcher.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "util/error.h"

namespace spindle::grammar {

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// Where a search for `marker` among new bytes (from `fresh` on) starts: an occurrence must end
// inside them and start at or after `floor`.
size_t search_from(size_t floor, size_t fresh, size_t marker_size) {
  return std::max(floor, fresh >= marker_size ? fresh - marker_size + 1 : 0);
}

void set_all(std::span<uint32_t> mask, size_t vocab_size) {
  std::memset(mask.data(), 0, mask.size() * sizeof(uint32_t));
  for (size_t w = 0; w < vocab_size / 32; ++w) mask[w] = ~0u;
  if (vocab_size % 32) mask[vocab_size / 32] = (1u << (vocab_size % 32)) - 1;
}

void set_bit(std::span<uint32_t> mask, TokenId id, bool on) {
  const auto i = static_cast<size_t>(id);
  if (on) {
    mask[i / 32] |= 1u << (i % 32);
  } else {
    mask[i / 32] &= ~(1u << (i % 32));
  }
}

}  // namespace

LazyMatcher::LazyMatcher(Matcher grammar, LazyArming arming) : base_(std::move(grammar)), arming_(std::move(arming)) {
  SPINDLE_CHECK(!arming_.trigger_strings.empty() || !arming_.trigger_tokens.empty() || arming_.at_content,
                "a lazily armed grammar needs a trigger or arms at the content");
  for (const std::string& s : arming_.trigger_strings) SPINDLE_CHECK(!s.empty(), "empty trigger string");
  const bool section = !arming_.section_open.empty() || !arming_.section_close.empty();
  if (section) {
    SPINDLE_CHECK(!arming_.section_close.empty(), "a free section needs its closing marker");
    SPINDLE_CHECK(arming_.section_opened || !arming_.section_open.empty(),
                  "a free section the prompt did not open needs its opening marker");
    pos_.phase = arming_.section_opened ? Phase::kSection : Phase::kStart;
  }
  markers_ = arming_.trigger_strings;
  if (section) markers_.push_back(arming_.section_close);
}

LazyMatcher::LazyMatcher(Matcher grammar, std::vector<std::string> trigger_strings, std::vector<TokenId> trigger_tokens)
    : LazyMatcher(std::move(grammar), [&] {
        LazyArming a;
        a.trigger_strings = std::move(trigger_strings);
        a.trigger_tokens = std::move(trigger_tokens);
        return a;
      }()) {}

size_t LazyMatcher::locate(Position& pos, size_t before) const {
  size_t fresh = before;  // triggers must end past this (the content's start once it begins here)
  if (pos.phase == Phase::kStart) {
    const size_t i = skip_space(text_);
    const std::string_view rest = std::string_view(text_).substr(i);
    const std::string& open = arming_.section_open;
    if (rest.starts_with(open)) {
      pos.phase = Phase::kSection;
      pos.section_from = i + open.size();
    } else if (std::string_view(open).starts_with(rest)) {
      return std::string::npos;  // only whitespace and the start of the opening marker yet
    } else {
      pos.phase = Phase::kContent;
      pos.content_from = fresh = 0;
    }
  }
  if (pos.phase == Phase::kSection) {
    const std::string& close = arming_.section_close;
    const size_t at = text_.find(close, search_from(pos.section_from, before, close.size()));
    if (at == std::string::npos) return std::string::npos;
    pos.phase = Phase::kContent;
    pos.content_from = fresh = at + close.size();
  }
  if (arming_.at_content) return pos.content_from;
  size_t best = std::string::npos;
  for (const std::string& s : arming_.trigger_strings) {
    const size_t at = text_.find(s, search_from(pos.content_from, fresh, s.size()));
    best = std::min(best, at);
  }
  return best;
}

bool LazyMatcher::advance_unarmed(TokenId id, bool commit) {
  const TokenizerInfo& tok = base_.tokenizer();
  if (arming_.required && tok.is_eos(id)) return false;
  Position pos = pos_;
  const size_t before = text_.size();
  const auto& tokens = arming_.trigger_tokens;
  if (std::find(tokens.begin(), tokens.end(), id) != tokens.end()) {
    locate(pos, before);
    if (pos.phase == Phase::kStart) pos = {Phase::kContent, 0, before};  // a call before any text
    if (pos.phase == Phase::kContent && commit) {
      armed_.emplace(base_.fork());
      history_.push_back({before, pos_, true, false});
      pos_ = pos;
      return true;
    }
    if (pos.phase == Phase::kContent || !commit) return true;
    history_.push_back({before, pos_, false, false});  // a trigger token inside the section
    pos_ = pos;
    return true;
  }
  const std::string* bytes = base_.token_bytes(id);
  if (bytes == nullptr && pos.phase == Phase::kStart && arming_.at_content && !tok.is_eos(id)) {
    return false;  // a special token neither opens the section nor starts the content
  }
  if (bytes != nullptr) text_ += *bytes;
  const size_t at = locate(pos, before);
  std::optional<Matcher> m;
  if (at == std::string::npos && pos.phase == Phase::kStart && arming_.at_content &&
      skip_space(text_) == text_.size() && !text_.empty()) {
    // Whitespace alone before the content: as much as the grammar allows at its start.
    if (!base_.fork().accept_bytes(text_)) {
      text_.resize(before);
      return false;
    }
  }
  if (at != std::string::npos) {
    m.emplace(base_.fork());
    if (at < text_.size() && !m->accept_bytes(std::string_view(text_).substr(at))) {
      text_.resize(before);
      return false;
    }
  }
  if (!commit) {
    text_.resize(before);
    return true;
  }
  if (m) armed_.emplace(std::move(*m));
  history_.push_back({before, pos_, m.has_value(), false});
  pos_ = pos;
  return true;
}

bool LazyMatcher::accept_token(TokenId id) {
  if (armed_) {
    if (!armed_->accept_token(id)) return false;
    history_.push_back({text_.size(), pos_, false, true});
    return true;
  }
  return advance_unarmed(id, /*commit=*/true);
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
    pos_ = s.position;
  }
}

void LazyMatcher::build_marker_tokens() {
  const Vocabulary& v = base_.tokenizer().vocab();
  marker_tokens_.assign(markers_.size(), {});
  for (size_t m = 0; m < markers_.size(); ++m) marker_tokens_[m].starting_with_tail.resize(markers_[m].size());
  for (size_t i = 0; i < v.token_bytes.size(); ++i) {
    const auto id = static_cast<TokenId>(i);
    const std::string* bytes = base_.token_bytes(id);
    if (bytes == nullptr) continue;
    const std::string_view b = *bytes;
    for (size_t m = 0; m < markers_.size(); ++m) {
      const std::string_view s = markers_[m];
      if (b.find(s) != std::string_view::npos) marker_tokens_[m].containing.push_back(id);
      for (size_t k = 1; k < s.size(); ++k) {
        if (b.starts_with(s.substr(k))) marker_tokens_[m].starting_with_tail[k].push_back(id);
      }
    }
  }
}

void LazyMatcher::add_marker_candidates(size_t marker, size_t from, std::vector<TokenId>& out) const {
  const MarkerTokens& t = marker_tokens_[marker];
  out.insert(out.end(), t.containing.begin(), t.containing.end());
  const std::string_view s = markers_[marker];
  const std::string_view text = text_;
  for (size_t k = 1; k < s.size(); ++k) {
    if (text.size() < from + k || !text.ends_with(s.substr(0, k))) continue;
    out.insert(out.end(), t.starting_with_tail[k].begin(), t.starting_with_tail[k].end());
  }
}

std::vector<TokenId> LazyMatcher::risky_tokens() const {
  std::vector<TokenId> out;
  const size_t num_triggers = arming_.trigger_strings.size();
  const bool section = markers_.size() > num_triggers;
  if (section && pos_.phase != Phase::kContent) {
    add_marker_candidates(num_triggers, pos_.phase == Phase::kSection ? pos_.section_from : text_.size(), out);
  }
  if (!arming_.at_content) {
    // In the section a trigger counts only after the close, inside the same token (above).
    const size_t from = pos_.phase == Phase::kContent ? pos_.content_from : pos_.phase == Phase::kStart ? 0 : text_.size();
    for (size_t m = 0; m < num_triggers; ++m) add_marker_candidates(m, from, out);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void LazyMatcher::fill_mask(std::span<uint32_t> mask) {
  if (armed_) {
    armed_->fill_mask(mask);
    return;
  }
  const TokenizerInfo& tok = base_.tokenizer();
  SPINDLE_CHECK(mask.size() >= tok.mask_words(), "mask has {} words, the vocabulary needs {}", mask.size(),
                tok.mask_words());
  if (marker_tokens_.empty() && !markers_.empty()) build_marker_tokens();
  const auto n = static_cast<size_t>(tok.vocab_size());
  if (pos_.phase == Phase::kStart && arming_.at_content) {
    // Every token that starts the content is the grammar's to judge (from the output's start);
    // the others (whitespace, the opening marker's bytes, special tokens) are simulated.
    Matcher m = base_.fork();
    if (text_.empty() || m.accept_bytes(text_)) {
      m.fill_mask(mask);
    } else {
      std::memset(mask.data(), 0, mask.size() * sizeof(uint32_t));
    }
    const std::string_view open = arming_.section_open;
    std::string joined;
    const size_t num_ids = std::min(n, tok.vocab().token_bytes.size());  // ids past them: padding, refused
    for (size_t i = 0; i < num_ids; ++i) {
      const auto id = static_cast<TokenId>(i);
      const std::string* bytes = base_.token_bytes(id);
      if (bytes != nullptr) {
        joined.assign(text_).append(*bytes);
        const std::string_view rest = std::string_view(joined).substr(skip_space(joined));
        if (!rest.starts_with(open) && !open.starts_with(rest)) continue;  // content: the grammar's bit
      }
      set_bit(mask, id, advance_unarmed(id, /*commit=*/false));
    }
    return;
  }
  set_all(mask, n);
  if (arming_.required) {
    for (TokenId id : tok.vocab().eos_ids) {
      if (static_cast<size_t>(id) < n) set_bit(mask, id, false);
    }
  }
  for (TokenId id : risky_tokens()) {
    if (!advance_unarmed(id, /*commit=*/false)) set_bit(mask, id, false);
  }
}

bool LazyMatcher::is_complete() { return armed_ ? armed_->is_complete() : !arming_.required; }

}  // namespace spindle::grammar
