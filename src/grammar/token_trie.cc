#include "grammar/token_trie.h"

#include <algorithm>

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

TokenTrie::TokenTrie(std::vector<TokenId> ids, const std::vector<std::string>& token_bytes, size_t mask_words) {
  std::sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) {
    const std::string& x = token_bytes[static_cast<size_t>(a)];
    const std::string& y = token_bytes[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  // Depth-first layout from the sorted strings: a node per distinct prefix.
  std::vector<uint8_t> byte = {0};
  std::vector<uint16_t> depth = {0};
  std::vector<uint32_t> token_begin = {0};
  std::string prev;
  for (TokenId id : ids) {
    const std::string& s = token_bytes[static_cast<size_t>(id)];
    SPINDLE_CHECK(!s.empty() && s.size() < 65535, "token {} has {} bytes (1 to 65534 allowed)", id, s.size());
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    if (common == s.size() && s.size() == prev.size()) {
      tokens_.push_back(id);  // same bytes as the previous token: same node
      continue;
    }
    for (size_t d = common; d < s.size(); ++d) {
      byte.push_back(static_cast<uint8_t>(s[d]));
      depth.push_back(static_cast<uint16_t>(d + 1));
      token_begin.push_back(static_cast<uint32_t>(tokens_.size()));
    }
    tokens_.push_back(id);
    max_depth_ = std::max<uint16_t>(max_depth_, static_cast<uint16_t>(s.size()));
    prev = s;
  }
  const size_t num = byte.size();
  token_begin.push_back(static_cast<uint32_t>(tokens_.size()));
  // next[i]: the first node after i whose depth is <= depth[i].
  std::vector<uint32_t> next(num, static_cast<uint32_t>(num));
  std::vector<uint32_t> open;
  for (size_t i = 0; i < num; ++i) {
    while (!open.empty() && depth[open.back()] >= depth[i]) {
      next[open.back()] = static_cast<uint32_t>(i);
      open.pop_back();
    }
    open.push_back(static_cast<uint32_t>(i));
  }
  // Bytes below each node and UTF-8 well-formedness below, from the end (a node comes after its
  // descendants in reverse order). ok bit u: every path below, read from decoder state u, is
  // well-formed (or cut short).
  below_.assign(num, {0, 0, 0, 0});
  std::vector<std::array<uint64_t, 4>> acc(static_cast<size_t>(max_depth_) + 2, {0, 0, 0, 0});
  std::vector<uint8_t> ok(num, 0xFF), ok_acc(static_cast<size_t>(max_depth_) + 2, 0xFF);
  for (size_t i = num; i-- > 0;) {
    const size_t d = depth[i];
    below_[i] = acc[d + 1];
    acc[d + 1] = {0, 0, 0, 0};
    ok[i] = ok_acc[d + 1];
    ok_acc[d + 1] = 0xFF;
    if (i == 0) break;
    for (int w = 0; w < 4; ++w) acc[d][w] |= below_[i][w];
    acc[d][byte[i] >> 6] |= uint64_t{1} << (byte[i] & 63);
    uint8_t contrib = 0;
    for (int u = 0; u < 8; ++u) {
      const int v = utf8_next(u, byte[i]);
      if (v >= 0 && ((ok[i] >> v) & 1)) contrib |= static_cast<uint8_t>(1u << u);
    }
    ok_acc[d] &= contrib;
  }
  // Relayout: each node's children get consecutive indices, assigned in the preorder of their
  // parents (the root keeps 0). pos[i]: node i's new index; first[i]: its first child's.
  std::vector<uint32_t> pos(num, 0), first(num, 0);
  std::vector<uint16_t> count(num, 0);
  uint32_t placed = 1;
  for (size_t i = 0; i < num; ++i) {
    first[i] = placed;
    for (size_t c = i + 1; c < next[i]; c = next[c]) pos[c] = placed++, ++count[i];
  }
  walk_.resize(num);
  std::vector<std::array<uint64_t, 4>> below(num);
  for (size_t i = 0; i < num; ++i) {
    WalkNode& w = walk_[pos[i]];
    w.ascii_below = {below_[i][0], below_[i][1]};
    w.child_begin = count[i] != 0 ? first[i] : 0;
    w.num_children = count[i];
    w.token_begin = token_begin[i];
    w.token_end = token_begin[next[i]];
    w.byte = byte[i];
    w.flags = static_cast<uint8_t>((next[i] == i + 1 ? kLeaf : 0) |
                                   ((below_[i][2] | below_[i][3]) != 0 ? kNonAsciiBelow : 0) | ((ok[i] & 1) ? kUtf8Below : 0));
    below[pos[i]] = below_[i];
  }
  below_ = std::move(below);
  bits_.assign(mask_words, 0);
  for (TokenId id : tokens_) bits_[static_cast<size_t>(id) >> 5] |= uint32_t{1} << (id & 31);
}

}  // namespace spindle::grammar
