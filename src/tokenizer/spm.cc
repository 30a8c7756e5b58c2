#include "tokenizer/spm.h"

#include <fmt/format.h>

#include <queue>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace spindle::tokenizer {

SpmModel SpmModel::from_vocab(std::span<const std::string_view> tokens, std::span<const float> scores,
                              std::string_view source) {
  SPINDLE_CHECK(scores.empty() || scores.size() >= tokens.size(),
                "{}: tokenizer.ggml.scores has {} entries for {} tokens", source, scores.size(),
                tokens.size());
  SpmModel m;
  m.id_to_token_.reserve(tokens.size());
  m.vocab_.reserve(tokens.size());
  m.scores_.assign(tokens.size(), 0.0f);
  for (size_t i = 0; i < tokens.size(); ++i) {
    m.id_to_token_.emplace_back(tokens[i]);
    m.vocab_.insert_or_assign(std::string(tokens[i]), static_cast<TokenId>(i));
    if (!scores.empty()) m.scores_[i] = scores[i];
  }
  for (int b = 0; b < 256; ++b) {
    auto id = m.token_to_id(fmt::format("<0x{:02X}>", b));
    if (!id) id = m.token_to_id(std::string(1, static_cast<char>(b)));
    SPINDLE_CHECK(id.has_value(),
                  "{}: SentencePiece vocabulary has no byte token <0x{:02X}> (needed for byte fallback)",
                  source, b);
    m.byte_ids_[b] = *id;
  }
  return m;
}

std::optional<TokenId> SpmModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void SpmModel::encode(std::string_view text, std::vector<TokenId>& out) const {
  // Symbols are byte ranges of text in a doubly linked list; a merged-away symbol has size 0.
  struct Symbol {
    size_t begin;
    size_t size;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t begin = pos;
    next_code_point(text, pos);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({begin, pos - begin, index - 1, pos == text.size() ? -1 : index + 1});
  }

  // A candidate is stale when either side was merged away or grew since it was queued: its
  // recorded size then differs from the sides' current sum (merges only grow the left side).
  struct Candidate {
    float score;
    int32_t left;
    int32_t right;
    size_t size;
  };
  auto lower = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> queue(lower);
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& a = symbols[static_cast<size_t>(left)];
    const Symbol& b = symbols[static_cast<size_t>(right)];
    const size_t size = a.size + b.size;
    const auto id = token_to_id(text.substr(a.begin, size));
    if (!id) return;
    queue.push({scores_[static_cast<size_t>(*id)], left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& a = symbols[static_cast<size_t>(c.left)];
    Symbol& b = symbols[static_cast<size_t>(c.right)];
    if (a.size == 0 || b.size == 0 || a.size + b.size != c.size) continue;
    a.size += b.size;
    b.size = 0;
    a.next = b.next;
    if (a.next >= 0) symbols[static_cast<size_t>(a.next)].prev = c.left;
    consider(a.prev, c.left);
    consider(c.left, a.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = text.substr(s.begin, s.size);
    if (const auto id = token_to_id(piece)) {
      out.push_back(*id);
      continue;
    }
    for (const char c : piece) out.push_back(byte_ids_[static_cast<unsigned char>(c)]);
  }
}

}  // namespace spindle::tokenizer
