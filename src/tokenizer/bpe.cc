#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include "tokenizer/json_ids.h"

#include <nlohmann/json.hpp>

#include <queue>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace spindle::tokenizer {
namespace {

std::pair<std::string, std::string> parse_merge(const nlohmann::json& m, size_t index) {
  if (m.is_array()) {
    SPINDLE_CHECK(m.size() == 2 && m[0].is_string() && m[1].is_string(),
                  "tokenizer.json: merge {} is not a pair of strings", index);
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  }
  SPINDLE_CHECK(m.is_string(), "tokenizer.json: merge {} is neither \"a b\" nor [\"a\", \"b\"]", index);
  const std::string s = m.get<std::string>();
  const size_t space = s.find(' ');
  SPINDLE_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                "tokenizer.json: merge {} '{}' is not two tokens separated by one space", index, s);
  return {s.substr(0, space), s.substr(space + 1)};
}

}  // namespace

BpeModel::BpeModel(BpeModel&& other) noexcept
    : vocab_(std::move(other.vocab_)),
      id_to_token_(std::move(other.id_to_token_)),
      merges_(std::move(other.merges_)),
      unk_id_(other.unk_id_),
      fuse_unk_(other.fuse_unk_),
      byte_fallback_(other.byte_fallback_),
      ignore_merges_(other.ignore_merges_),
      has_all_bytes_(other.has_all_bytes_),
      skipped_merges_(other.skipped_merges_) {
  std::copy(std::begin(other.byte_ids_), std::end(other.byte_ids_), std::begin(byte_ids_));
}

BpeModel BpeModel::from_json(const nlohmann::json& j) {
  const std::string type = j.value("type", "");
  SPINDLE_CHECK(type == "BPE", "tokenizer.json: model type '{}' is not supported (BPE only)", type);
  SPINDLE_CHECK(j.value("dropout", nlohmann::json()).is_null() || j.at("dropout").get<double>() == 0.0,
                "tokenizer.json: BPE dropout is not supported");
  SPINDLE_CHECK(j.value("continuing_subword_prefix", nlohmann::json()).is_null() &&
                    j.value("end_of_word_suffix", nlohmann::json()).is_null(),
                "tokenizer.json: BPE continuing_subword_prefix/end_of_word_suffix are not supported");
  BpeModel m;
  TokenId max_id = -1;
  for (const auto& [token, id_json] : j.at("vocab").items()) {
    const TokenId id = token_id_from_json(id_json, fmt::format("the id of token '{}'", token));
    m.vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  m.id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : m.vocab_) m.id_to_token_[static_cast<size_t>(id)] = token;

  const auto& merges = j.at("merges");
  m.merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    auto [a, b] = parse_merge(merges[i], i);
    const auto ia = m.token_to_id(a);
    const auto ib = m.token_to_id(b);
    const auto merged = m.token_to_id(a + b);
    SPINDLE_CHECK(ia && ib && merged, "tokenizer.json: merge {} ('{}' '{}') uses tokens missing from the vocab",
                  i, a, b);
    // The first occurrence of a pair wins (lowest rank).
    m.merges_.try_emplace(pair_key(*ia, *ib), Merge{static_cast<int32_t>(i), *merged});
  }

  const auto& unk = j.value("unk_token", nlohmann::json());
  if (unk.is_string()) {
    m.unk_id_ = m.token_to_id(unk.get<std::string>());
    SPINDLE_CHECK(m.unk_id_.has_value(), "tokenizer.json: unk_token '{}' is not in the vocab",
                  unk.get<std::string>());
  }
  m.fuse_unk_ = j.value("fuse_unk", false);
  m.byte_fallback_ = j.value("byte_fallback", false);
  m.ignore_merges_ = j.value("ignore_merges", false);
  if (m.byte_fallback_) {
    m.has_all_bytes_ = true;
    for (int b = 0; b < 256; ++b) {
      const auto id = m.token_to_id(fmt::format("<0x{:02X}>", b));
      m.has_all_bytes_ = m.has_all_bytes_ && id.has_value();
      m.byte_ids_[b] = id.value_or(-1);
    }
  }
  return m;
}

BpeModel BpeModel::from_vocab(std::span<const std::string_view> tokens,
                              std::span<const std::string_view> merges, bool ignore_merges,
                              std::string_view source) {
  BpeModel m;
  m.id_to_token_.reserve(tokens.size());
  m.vocab_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    m.id_to_token_.emplace_back(tokens[i]);
    m.vocab_.insert_or_assign(std::string(tokens[i]), static_cast<TokenId>(i));
  }
  m.merges_.reserve(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view merge = merges[i];
    // llama.cpp splits at the first space after the first byte (a side may begin with ' ').
    const size_t space = merge.size() > 1 ? merge.find(' ', 1) : std::string_view::npos;
    SPINDLE_CHECK(space != std::string_view::npos,
                  "{}: tokenizer.ggml.merges[{}] '{}' is not two tokens separated by a space", source, i,
                  merge);
    const std::string_view a = merge.substr(0, space);
    const std::string_view b = merge.substr(space + 1);
    joined.assign(a);
    joined.append(b);
    const auto ia = m.token_to_id(a);
    const auto ib = m.token_to_id(b);
    const auto merged = m.token_to_id(joined);
    if (!ia || !ib || !merged) {
      ++m.skipped_merges_;
      continue;
    }
    m.merges_.try_emplace(pair_key(*ia, *ib), Merge{static_cast<int32_t>(i), *merged});
  }
  m.ignore_merges_ = ignore_merges;
  return m;
}

std::optional<TokenId> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<unsigned char> parse_byte_token(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(token[3]);
  const int lo = hex(token[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

void BpeModel::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<TokenId> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<TokenId>& out) const {
  // Symbols form a doubly linked list over a vector; merged-away symbols get id -1.
  struct Symbol {
    TokenId id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](TokenId id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1});
    if (index > 0) symbols[static_cast<size_t>(index - 1)].next = index;
  };

  TokenId pending_unk = -1;  // unk (run, when fused) not yet added
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    next_code_point(word, pos);
    const std::string_view ch = word.substr(start, pos - start);
    if (const auto id = token_to_id(ch)) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(*id);
      continue;
    }
    if (byte_fallback_ && has_all_bytes_) {
      for (const char c : ch) add(byte_ids_[static_cast<unsigned char>(c)]);
      continue;
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);

  // Candidate merges, lowest rank first, then leftmost. Entries go stale when either side
  // changes; they are checked against the current symbols when popped.
  struct Candidate {
    int32_t rank;
    int32_t left;
    TokenId left_id;
    TokenId right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const Symbol& a = symbols[static_cast<size_t>(left)];
    if (a.next < 0) return;
    const Symbol& b = symbols[static_cast<size_t>(a.next)];
    const auto it = merges_.find(pair_key(a.id, b.id));
    if (it != merges_.end()) queue.push({it->second.rank, left, a.id, b.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& a = symbols[static_cast<size_t>(c.left)];
    if (a.id != c.left_id || a.next < 0) continue;
    Symbol& b = symbols[static_cast<size_t>(a.next)];
    if (b.id != c.right_id) continue;
    a.id = merges_.at(pair_key(c.left_id, c.right_id)).merged;
    b.id = -1;
    a.next = b.next;
    if (a.next >= 0) symbols[static_cast<size_t>(a.next)].prev = c.left;
    consider(a.prev);
    consider(c.left);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    out.push_back(symbols[static_cast<size_t>(i)].id);
  }
}

}  // namespace spindle::tokenizer
