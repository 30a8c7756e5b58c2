// The grammar's view of a Spindle tokenizer: each id's decoded bytes (what the detokenizer
// emits for it alone: byte-level mapped back to bytes, SentencePiece '▁' as a space, <0xNN>
// as the byte, partial UTF-8 kept), its special ids and its EOS ids.
#pragma once

#include <vector>

#include "grammar/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace spindle::grammar {

// extra_eos: further ids that end generation (e.g. config.json's eos_token_id); vocab_size:
// the mask width (the model's logit count; 0 = the tokenizer's size).
Vocabulary vocabulary_from_tokenizer(const tokenizer::Tokenizer& tok, const std::vector<TokenId>& extra_eos = {},
                                     int32_t vocab_size = 0);

}  // namespace spindle::grammar
