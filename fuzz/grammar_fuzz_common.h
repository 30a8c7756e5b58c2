// Shared by the grammar fuzz targets: compile a front end's grammar with tight limits and drive
// a matcher over a byte vocabulary with the input's bytes. Contract: a bad input throws
// spindle::Error; anything else (another exception, a crash, a sanitizer report) is a bug.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "grammar/matcher.h"

namespace spindle::grammar::fuzz {

inline std::shared_ptr<const TokenizerInfo> byte_vocab() {
  static const auto info = [] {
    Vocabulary v;
    for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
    v.token_bytes.push_back("{\"");
    v.token_bytes.push_back("");
    v.eos_ids = {257};
    return std::make_shared<const TokenizerInfo>(v);
  }();
  return info;
}

inline CompileLimits fuzz_limits() {
  CompileLimits l;
  l.max_nfa_states = 200'000;
  l.max_dfa_states = 20'000;
  l.max_rules = 50'000;
  l.max_seconds = 1.0;
  return l;
}

// Runs the grammar over `text`: masks, forced bytes, accept, rollback.
inline void exercise(const Grammar& g, const std::string& text) {
  const auto c = CompiledGrammar::compile(g, fuzz_limits());
  Matcher m(c, byte_vocab());
  std::vector<uint32_t> mask(byte_vocab()->mask_words());
  for (size_t i = 0; i < text.size() && i < 64; ++i) {
    m.fill_mask(mask);
    const bool allowed = (mask[static_cast<uint8_t>(text[i]) / 32] >> (static_cast<uint8_t>(text[i]) % 32)) & 1;
    if (allowed != m.fork().accept_bytes(text.substr(i, 1))) std::abort();  // mask disagrees with the matcher
    if (!m.accept_bytes(text.substr(i, 1))) break;
  }
  (void)m.forced_bytes(32);
  (void)m.is_complete();
  m.rollback(m.num_tokens() / 2);
  m.fill_mask(mask);
}

}  // namespace spindle::grammar::fuzz
