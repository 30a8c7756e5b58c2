// Streaming detokenization: feed generated ids one at a time, get the text they complete.
//
// The concatenation of every push() and finish() equals Tokenizer::decode(all ids) (decode
// is defined through this class). A chunk never ends inside a UTF-8 sequence: bytes of an
// incomplete character are held until it completes (or finish() settles them as U+FFFD).
// The decoder's leading strip (SentencePiece's prefix space) applies only at the very
// start of the sequence.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace spindle::tokenizer {

class IncrementalDetokenizer {
 public:
  // The tokenizer must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = true);

  // Returns the new text (possibly empty).
  std::string push(TokenId id);
  // Appends the new text to out.
  void push(TokenId id, std::string& out);
  // Flushes held-back bytes; call once at the end of the sequence.
  std::string finish();
  void finish(std::string& out);

  size_t num_tokens() const { return num_tokens_; }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  int strip_left_;        // leading strip_content copies that may still be removed
  bool emitted_ = false;  // some token produced bytes (for join_with_space)
  size_t num_tokens_ = 0;
  std::string scratch_;
  Utf8Assembler assembler_;
};

}  // namespace spindle::tokenizer
