#include "grammar/vocabulary.h"

#include <algorithm>
#include <numeric>

#include "util/error.h"

namespace spindle::grammar {
namespace {

// UTF-8 decoder states: 0 at a character boundary; 1-3 that many continuation bytes (80-BF) to
// come; 4 after E0 (A0-BF, then 1); 5 after ED (80-9F, then 1); 6 after F0 (90-BF, then 2);
// 7 after F4 (80-8F, then 2). -1: not well-formed.
int utf8_next(int u, uint8_t b) {
  auto cont = [&](uint8_t lo, uint8_t hi, int then) { return b >= lo && b <= hi ? then : -1; };
  switch (u) {
    case 0:
      if (b < 0x80) return 0;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 4;
      if (b == 0xED) return 5;
      if (b >= 0xE1 && b <= 0xEF) return 2;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 3;
      return b == 0xF4 ? 7 : -1;
    case 1: return cont(0x80, 0xBF, 0);
    case 2: return cont(0x80, 0xBF, 1);
    case 3: return cont(0x80, 0xBF, 2);
    case 4: return cont(0xA0, 0xBF, 1);
    case 5: return cont(0x80, 0x9F, 1);
    case 6: return cont(0x90, 0xBF, 2);
    default: return cont(0x80, 0x8F, 2);
  }
}

}  // namespace

void TokenizerInfo::build_utf8_below() {
  // ok[i] bit u: every path below node i, read from decoder state u, is well-formed (or cut
  // short). Computed from the end: a node's children come after it, each depth accumulating.
  const size_t num = byte_.size();
  std::vector<uint8_t> ok(num, 0xFF);
  std::vector<uint8_t> acc(static_cast<size_t>(max_depth_) + 2, 0xFF);
  for (size_t i = num; i-- > 0;) {
    const size_t d = depth_[i];
    ok[i] = acc[d + 1];
    acc[d + 1] = 0xFF;
    if (i == 0) break;
    uint8_t contrib = 0;
    for (int u = 0; u < 8; ++u) {
      const int v = utf8_next(u, byte_[i]);
      if (v >= 0 && ((ok[i] >> v) & 1)) contrib |= static_cast<uint8_t>(1u << u);
    }
    acc[d] &= contrib;
  }
  utf8_below_.resize(num);
  for (size_t i = 0; i < num; ++i) utf8_below_[i] = ok[i] & 1;
  walk_.resize(num);
  for (size_t i = 0; i < num; ++i) {
    WalkNode& w = walk_[i];
    w.ascii_below = {below_[i][0], below_[i][1]};
    w.next = next_[i];
    w.token_begin = token_begin_[i];
    w.token_end = token_begin_[next_[i]];
    w.depth = depth_[i];
    w.byte = byte_[i];
    w.flags = static_cast<uint8_t>((next_[i] == i + 1 ? kLeaf : 0) | ((below_[i][2] | below_[i][3]) != 0 ? kNonAsciiBelow : 0) |
                                   (utf8_below_[i] ? kUtf8Below : 0));
  }
  trie_bits_.assign(mask_words(), 0);
  for (TokenId id : tokens_) trie_bits_[static_cast<size_t>(id) >> 5] |= uint32_t{1} << (id & 31);
}

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
  std::vector<TokenId> ids;
  for (TokenId id = 0; id < n; ++id) {
    if (grammar_bytes(id) != nullptr) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) {
    const std::string& x = vocab_.token_bytes[static_cast<size_t>(a)];
    const std::string& y = vocab_.token_bytes[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  // Depth-first layout from the sorted strings: a node per distinct prefix.
  byte_.push_back(0);
  depth_.push_back(0);
  token_begin_.push_back(0);
  std::vector<uint32_t> path = {0};  // node index per depth of the previous string
  std::string prev;
  for (TokenId id : ids) {
    const std::string& s = vocab_.token_bytes[static_cast<size_t>(id)];
    SPINDLE_CHECK(s.size() < 65535, "token {} is too long ({} bytes)", id, s.size());
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    if (common == s.size() && s.size() == prev.size() && byte_.size() > 1) {
      tokens_.push_back(id);  // same bytes as the previous token: same node
      continue;
    }
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      byte_.push_back(static_cast<uint8_t>(s[d]));
      depth_.push_back(static_cast<uint16_t>(d + 1));
      token_begin_.push_back(static_cast<uint32_t>(tokens_.size()));
      path.push_back(static_cast<uint32_t>(byte_.size() - 1));
    }
    token_begin_.back() = static_cast<uint32_t>(tokens_.size());
    tokens_.push_back(id);
    max_depth_ = std::max<uint16_t>(max_depth_, static_cast<uint16_t>(s.size()));
    prev = s;
  }
  // token_begin_[i] is where node i's tokens start; they end where node i+1's start.
  token_begin_.push_back(static_cast<uint32_t>(tokens_.size()));
  // next[i]: the first node after i whose depth is <= depth[i].
  const size_t num = byte_.size();
  next_.assign(num, static_cast<uint32_t>(num));
  std::vector<uint32_t> open;
  for (size_t i = 0; i < num; ++i) {
    while (!open.empty() && depth_[open.back()] >= depth_[i]) {
      next_[open.back()] = static_cast<uint32_t>(i);
      open.pop_back();
    }
    open.push_back(static_cast<uint32_t>(i));
  }
  // bytes below each node, from the end (a node comes after its descendants in reverse order).
  below_.assign(num, {0, 0, 0, 0});
  std::vector<std::array<uint64_t, 4>> acc(static_cast<size_t>(max_depth_) + 2, {0, 0, 0, 0});
  for (size_t i = num; i-- > 0;) {
    const size_t d = depth_[i];
    below_[i] = acc[d + 1];
    acc[d + 1] = {0, 0, 0, 0};
    for (int w = 0; w < 4; ++w) acc[d][w] |= below_[i][w];
    if (i > 0) acc[d][byte_[i] >> 6] |= uint64_t{1} << (byte_[i] & 63);
  }
  build_utf8_below();
}

bool TokenizerInfo::is_eos(TokenId id) const {
  return id >= 0 && id < vocab_.vocab_size && is_eos_[static_cast<size_t>(id)] != 0;
}

const std::string* TokenizerInfo::grammar_bytes(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_.token_bytes.size()) return nullptr;
  if (vocab_.special[static_cast<size_t>(id)] || is_eos_[static_cast<size_t>(id)]) return nullptr;
  const std::string& s = vocab_.token_bytes[static_cast<size_t>(id)];
  return s.empty() ? nullptr : &s;
}

}  // namespace spindle::grammar
