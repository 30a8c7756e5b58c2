#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace spindle::tokenizer {
namespace {

// Unicode White_Space (Rust's char::is_whitespace, which HF uses for lstrip/rstrip).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Start of the run of whitespace that ends at `end` (not before `limit`).
size_t whitespace_start(std::string_view text, size_t end, size_t limit) {
  while (end > limit) {
    size_t start = end - 1;
    while (start > limit && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t pos = start;
    if (!is_white_space(next_code_point(text, pos))) break;
    end = start;
  }
  return end;
}

// End of the run of whitespace that starts at `begin`.
size_t whitespace_end(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    size_t pos = begin;
    if (!is_white_space(next_code_point(text, pos))) break;
    begin = pos;
  }
  return begin;
}

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, MatchOrder order)
    : tokens_(std::move(tokens)), order_(order) {
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    if (!tokens_[i].content.empty()) by_length_.push_back(i);
  }
  std::stable_sort(by_length_.begin(), by_length_.end(), [&](uint32_t a, uint32_t b) {
    const AddedToken& x = tokens_[a];
    const AddedToken& y = tokens_[b];
    return x.content.size() != y.content.size() ? x.content.size() > y.content.size() : x.id < y.id;
  });
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](uint32_t a, uint32_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
  }
}

size_t AddedTokenMatcher::match_at(std::string_view text, size_t pos, bool match_special,
                                   size_t& index) const {
  for (const uint32_t i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const AddedToken& token = tokens_[i];
    if (!match_special && token.special) continue;
    if (text.compare(pos, token.content.size(), token.content) != 0) continue;
    const size_t end = pos + token.content.size();
    if (token.single_word) {
      if (pos > 0 && is_word_char(text[pos - 1])) continue;
      if (end < text.size() && is_word_char(text[end])) continue;
    }
    index = i;
    return token.content.size();
  }
  return 0;
}

std::vector<Segment> AddedTokenMatcher::split(std::string_view text, bool match_special) const {
  if (order_ == MatchOrder::kLongestFirst) return split_longest_first(text, match_special);
  std::vector<Segment> segments;
  size_t text_begin = 0;  // start of the pending plain text
  size_t pos = 0;
  while (pos < text.size()) {
    size_t index = 0;
    const size_t length = match_at(text, pos, match_special, index);
    if (length == 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t begin = pos;
    size_t end = pos + length;
    if (token.lstrip) begin = whitespace_start(text, begin, text_begin);
    if (token.rstrip) end = whitespace_end(text, end);
    if (begin > text_begin) segments.push_back({text.substr(text_begin, begin - text_begin), -1, text_begin});
    segments.push_back({text.substr(begin, end - begin), token.id, begin});
    text_begin = end;
    pos = end;
  }
  if (text_begin < text.size()) segments.push_back({text.substr(text_begin), -1, text_begin});
  return segments;
}

std::vector<Segment> AddedTokenMatcher::split_longest_first(std::string_view text, bool match_special) const {
  std::vector<Segment> segments;
  if (text.empty()) return segments;
  segments.push_back({text, -1, 0});
  bool present[256] = {};  // bytes of text: a token whose first byte is absent cannot match
  for (const char c : text) present[static_cast<unsigned char>(c)] = true;
  std::vector<Segment> next;
  for (const uint32_t i : by_length_) {
    const AddedToken& token = tokens_[i];
    if (!match_special && token.special) continue;
    if (!present[static_cast<unsigned char>(token.content[0])]) continue;
    next.clear();
    bool changed = false;
    for (const Segment& segment : segments) {
      if (segment.id >= 0) {
        next.push_back(segment);
        continue;
      }
      size_t begin = segment.offset;              // of the remaining plain text, in text
      const size_t end = begin + segment.text.size();
      while (begin < end) {
        const size_t match = text.substr(0, end).find(token.content, begin);
        if (match == std::string_view::npos) break;
        changed = true;
        size_t left_end = match;
        if (token.lstrip) left_end = whitespace_start(text, left_end, begin);
        if (left_end > begin) next.push_back({text.substr(begin, left_end - begin), -1, begin});
        next.push_back({text.substr(match, token.content.size()), token.id, match});
        begin = match + token.content.size();
        if (token.rstrip) begin = std::min(whitespace_end(text, begin), end);
      }
      if (begin < end) next.push_back({text.substr(begin, end - begin), -1, begin});
    }
    if (changed) segments.swap(next);
  }
  return segments;
}

}  // namespace spindle::tokenizer
