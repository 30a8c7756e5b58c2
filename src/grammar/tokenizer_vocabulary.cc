#include "grammar/tokenizer_vocabulary.h"

#include <algorithm>

namespace spindle::grammar {

Vocabulary vocabulary_from_tokenizer(const tokenizer::Tokenizer& tok, const std::vector<TokenId>& extra_eos,
                                     int32_t vocab_size) {
  Vocabulary v;
  const int32_t n = tok.vocab_size();
  v.vocab_size = std::max(n, vocab_size);
  v.token_bytes.resize(static_cast<size_t>(n));
  v.special.assign(static_cast<size_t>(n), 0);
  for (TokenId id = 0; id < n; ++id) {
    if (tok.is_special(id)) v.special[static_cast<size_t>(id)] = 1;  // its text kept: allow_special_token
    tok.append_token_bytes(id, /*skip_special_tokens=*/false, v.token_bytes[static_cast<size_t>(id)]);
  }
  v.eos_ids = tok.eos_ids();
  for (TokenId id : extra_eos) {
    if (std::find(v.eos_ids.begin(), v.eos_ids.end(), id) == v.eos_ids.end()) v.eos_ids.push_back(id);
  }
  return v;
}

}  // namespace spindle::grammar
