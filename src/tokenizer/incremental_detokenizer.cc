#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/normalizer.h"

namespace spindle::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer),
      skip_special_tokens_(skip_special_tokens),
      strip_left_(tokenizer.decoder().strip_start()) {}

std::string IncrementalDetokenizer::push(TokenId id) {
  std::string out;
  push(id, out);
  return out;
}

void IncrementalDetokenizer::push(TokenId id, std::string& out) {
  ++num_tokens_;
  scratch_.clear();
  tokenizer_->append_token_bytes(id, skip_special_tokens_, scratch_);
  if (scratch_.empty()) return;
  if (tokenizer_->decoder().join_with_space() && emitted_) scratch_ = prepend(" ", scratch_);
  emitted_ = true;
  if (strip_left_ > 0) {
    const std::string& content = tokenizer_->decoder().strip_content();
    size_t cut = 0;
    while (strip_left_ > 0 && !content.empty() && scratch_.compare(cut, content.size(), content) == 0) {
      cut += content.size();
      --strip_left_;
    }
    if (cut < scratch_.size()) strip_left_ = 0;  // the text has started
    scratch_.erase(0, cut);
  }
  assembler_.push(scratch_, out);
}

std::string IncrementalDetokenizer::finish() {
  std::string out;
  finish(out);
  return out;
}

void IncrementalDetokenizer::finish(std::string& out) { assembler_.finish(out); }

}  // namespace spindle::tokenizer
