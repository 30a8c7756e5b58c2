// SentencePiece-type vocabularies as GGUF files carry them (tokenizer.ggml.model = "llama"):
// tokens with float scores, no merge list, byte fallback through "<0xNN>" tokens.
//
// Encoding follows llama.cpp's SPM tokenizer (src/llama-vocab.cpp, llm_tokenizer_spm_session):
// the text (spaces already replaced by U+2581) starts as one symbol per UTF-8 character; every
// adjacent pair whose concatenation is a token is a candidate, the candidate whose token has the
// highest score merges first (ties: leftmost), and merging repeats until no candidate remains.
// A final symbol that is a token becomes its id; any other (a single character missing from the
// vocabulary) becomes the byte tokens of its UTF-8 bytes.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"

namespace spindle::tokenizer {

class SpmModel {
 public:
  // tokens[i] has id i and score scores[i] (scores empty: all 0). Every byte must have a token
  // "<0xNN>" (or, as llama.cpp falls back to, a one-byte token of that byte); otherwise a
  // spindle::Error names `source` and the byte.
  static SpmModel from_vocab(std::span<const std::string_view> tokens, std::span<const float> scores,
                             std::string_view source);

  // Appends the ids of `text` (valid UTF-8, whitespace already escaped). Thread-safe.
  void encode(std::string_view text, std::vector<TokenId>& out) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  const std::vector<std::string>& tokens() const { return id_to_token_; }
  TokenId byte_token(unsigned char b) const { return byte_ids_[b]; }

 private:
  SpmModel() = default;

  StringMap<TokenId> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<float> scores_;
  TokenId byte_ids_[256] = {};
};

}  // namespace spindle::tokenizer
