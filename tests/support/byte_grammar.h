// Grammar tests over a byte vocabulary (token b < 256 is byte b; token 256, empty, is the end of
// text): whether a compiled grammar accepts a whole text, and random texts made by walking the
// grammar's allowed bytes.
#pragma once

#include <gtest/gtest.h>

#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "grammar/matcher.h"

namespace spindle::testing {

// 256 one-byte tokens, then the empty end-of-text token (id 256).
inline std::shared_ptr<const grammar::TokenizerInfo> byte_vocab() {
  grammar::Vocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  v.token_bytes.push_back("");
  v.eos_ids = {256};
  return std::make_shared<const grammar::TokenizerInfo>(v);
}

// Whether `g` accepts all of `text` and is complete after it.
inline bool matches(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::string& text) {
  grammar::Matcher m(g, byte_vocab());
  return m.accept_bytes(text) && m.is_complete();
}

// How random_walk draws. Each step, once the grammar is complete, the walk ends when no byte is
// allowed, with chance 1 / end_one_in, or when the text is longer than end_after. Otherwise it
// draws an allowed byte (printable ASCII or '\n' only with printable_only); once the text is longer
// than steer_after, except with chance 1 / random_one_in, it takes instead the first allowed byte
// of `closers` (inside a JSON string: the closing quote).
struct WalkOptions {
  size_t max_bytes = 0;  // no end by then: nullopt
  int end_one_in = 1;
  size_t end_after = SIZE_MAX;
  size_t steer_after = 0;
  int random_one_in = 1;
  std::vector<int> closers;
  bool printable_only = false;
};

// A text `g` accepts, made of random allowed bytes, steered to an end once long (see
// WalkOptions); nullopt when no byte is allowed before the end or no end comes in max_bytes.
// The walk follows JSON's lexical structure (in or out of a string) to steer.
inline std::optional<std::string> random_walk(const std::shared_ptr<const grammar::CompiledGrammar>& g,
                                              std::mt19937& rng, const WalkOptions& o) {
  grammar::Matcher m(g, byte_vocab());
  std::string out;
  bool in_string = false, escaped = false;
  while (out.size() < o.max_bytes) {
    const bool complete = m.is_complete();
    const std::bitset<256> allowed = m.allowed_bytes();
    if (complete && (allowed.none() || rng() % o.end_one_in == 0 || out.size() > o.end_after)) return out;
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b) {
      if (allowed[static_cast<size_t>(b)] && (!o.printable_only || b == '\n' || (b >= 0x20 && b < 0x7f))) {
        bytes.push_back(b);
      }
    }
    if (bytes.empty()) return std::nullopt;
    int pick = bytes[rng() % bytes.size()];
    if (out.size() > o.steer_after && rng() % o.random_one_in != 0) {
      for (int c : in_string ? std::vector<int>{'"'} : o.closers) {
        if (allowed[static_cast<size_t>(c)]) {
          pick = c;
          break;
        }
      }
    }
    if (escaped) {
      escaped = false;
    } else if (in_string && pick == '\\') {
      escaped = true;
    } else if (pick == '"') {
      in_string = !in_string;
    }
    EXPECT_TRUE(m.accept_bytes(std::string(1, static_cast<char>(pick))));
    out += static_cast<char>(pick);
  }
  return std::nullopt;
}

}  // namespace spindle::testing
