#include "grammar/vocabulary.h"

#include <algorithm>
#include <iterator>

#include "util/error.h"

namespace spindle::grammar {
namespace {

// The number of characters of s when s is well-formed UTF-8 made only of characters a JSON
// string holds unescaped (not '"', '\\', U+0000-U+001F, U+007F); 0 otherwise.
int json_string_chars(const std::string& s) {
  int chars = 0;
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      if (b < 0x20 || b == '"' || b == '\\' || b == 0x7F) return 0;
      ++i, ++chars;
      continue;
    }
    // Well-formed multi-byte sequences only (Unicode's table 3-7).
    int n = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) n = 1;
    else if (b == 0xE0) n = 2, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC) n = 2;
    else if (b == 0xED) n = 2, hi = 0x9F;
    else if (b >= 0xEE && b <= 0xEF) n = 2;
    else if (b == 0xF0) n = 3, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) n = 3;
    else if (b == 0xF4) n = 3, hi = 0x8F;
    else return 0;
    if (i + static_cast<size_t>(n) >= s.size()) return 0;  // cut short
    for (int k = 1; k <= n; ++k) {
      const auto c = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return 0;
    }
    i += static_cast<size_t>(n) + 1, ++chars;
  }
  return chars;
}

}  // namespace

TokenizerInfo::TokenizerInfo(Vocabulary vocab) : vocab_(std::move(vocab)) {
  const auto n = static_cast<int32_t>(vocab_.token_bytes.size());
  if (vocab_.vocab_size < n) vocab_.vocab_size = n;
  vocab_.special.resize(static_cast<size_t>(n), 0);
  is_eos_.assign(static_cast<size_t>(vocab_.vocab_size), 0);
  for (TokenId id : vocab_.eos_ids) {
    SPINDLE_CHECK(id >= 0 && id < vocab_.vocab_size, "EOS id {} outside the vocabulary (size {})", id,
                  vocab_.vocab_size);
    is_eos_[static_cast<size_t>(id)] = 1;
  }
  for (TokenId id = 0; id < n; ++id) {
    const auto i = static_cast<size_t>(id);
    if (vocab_.special[i] && !is_eos_[i] && !vocab_.token_bytes[i].empty()) {
      special_ids_[vocab_.token_bytes[i]].push_back(id);
    }
  }
  constexpr int kSlices = static_cast<int>(std::size(kSliceMaxChars));
  std::vector<std::vector<TokenId>> ids(kSlices + 2);
  for (TokenId id = 0; id < n; ++id) {
    const std::string* bytes = grammar_bytes(id);
    if (bytes == nullptr) continue;
    const int chars = json_string_chars(*bytes);
    int k = 0;
    if (chars > 0) {
      k = 1;
      while (chars > kSliceMaxChars[k - 1]) ++k;
    } else {
      const size_t c = static_cast<size_t>(
          std::find_if(bytes->begin(), bytes->end(), [](char x) { return static_cast<uint8_t>(x) < 0x20; }) -
          bytes->begin());
      if (c < bytes->size()) {
        const int prefix = c == 0 ? 0 : json_string_chars(bytes->substr(0, c));
        if ((c == 0 || prefix > 0) && prefix <= kControlMaxPrefix) k = kSlices + 1;
      }
    }
    ids[static_cast<size_t>(k)].push_back(id);
  }
  tries_.reserve(ids.size());
  for (auto& v : ids) tries_.emplace_back(std::move(v), vocab_.token_bytes, mask_words());
  std::vector<uint32_t> acc(mask_words(), 0);
  for (int k = 1; k <= kSlices; ++k) {
    const auto bits = tries_[static_cast<size_t>(k)].token_bits();
    for (size_t w = 0; w < acc.size(); ++w) acc[w] |= bits[w];
    prefix_bits_.push_back(acc);
  }
}

size_t TokenizerInfo::num_nodes() const {
  size_t total = 0;
  for (const TokenTrie& t : tries_) total += t.num_nodes();
  return total;
}

uint16_t TokenizerInfo::max_depth() const {
  uint16_t d = 0;
  for (const TokenTrie& t : tries_) d = std::max(d, t.max_depth());
  return d;
}

bool TokenizerInfo::is_eos(TokenId id) const {
  return id >= 0 && id < vocab_.vocab_size && is_eos_[static_cast<size_t>(id)] != 0;
}

std::span<const TokenId> TokenizerInfo::special_ids(const std::string& text) const {
  auto it = special_ids_.find(text);
  if (it == special_ids_.end()) return {};
  return it->second;
}

const std::string* TokenizerInfo::grammar_bytes(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_.token_bytes.size()) return nullptr;
  if (vocab_.special[static_cast<size_t>(id)] || is_eos_[static_cast<size_t>(id)]) return nullptr;
  const std::string& s = vocab_.token_bytes[static_cast<size_t>(id)];
  return s.empty() ? nullptr : &s;
}

}  // namespace spindle::grammar
