#include "grammar/string_horizon.h"

#include <algorithm>

#include "util/error.h"

namespace spindle::grammar {
namespace {

void sort_unique(std::vector<int32_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

bool StringHorizon::successors(int32_t s, std::vector<int32_t>& out) {
  const auto i = static_cast<size_t>(s);
  if (succ_begin_.size() <= i) succ_begin_.resize(std::max(dfa_.num_states(), i + 1), 0);
  if (succ_begin_[i] < 0) return false;
  if (succ_begin_[i] > 0) {
    const auto at = static_cast<size_t>(succ_begin_[i] - 1);
    const auto n = static_cast<size_t>(succ_[at]);
    out.insert(out.end(), succ_.begin() + static_cast<long>(at) + 1, succ_.begin() + static_cast<long>(at + 1 + n));
    return true;
  }
  std::vector<int32_t> res;
  bool ok = true;
  // ASCII: 0x20-0x7E but '"' and '\\'.
  for (int b = 0x20; b < 0x7F && ok; ++b) {
    if (b == '"' || b == '\\') continue;
    const int32_t t = dfa_.next(s, static_cast<uint8_t>(b));
    ok = t != LexerDfa::kDead;
    if (res.empty() || res.back() != t) res.push_back(t);
  }
  // Every well-formed multi-byte character (unless the alphabet is ASCII only).
  if (ok && !ascii_only_) ok = dfa_.utf8_char_targets(s, res);
  if (succ_begin_.size() < dfa_.num_states()) succ_begin_.resize(dfa_.num_states(), 0);
  if (!ok) {
    succ_begin_[i] = -1;
    return false;
  }
  sort_unique(res);
  succ_begin_[i] = static_cast<int32_t>(succ_.size()) + 1;
  succ_.push_back(static_cast<int32_t>(res.size()));
  succ_.insert(succ_.end(), res.begin(), res.end());
  out.insert(out.end(), res.begin(), res.end());
  return true;
}

void StringHorizon::compute_control_distance() {
  // Breadth-first from the bad states (accepting, or with an edge on a control byte) backwards
  // over epsilon moves (distance + 0) and string-byte edges (+ 1), capped at kFar.
  const Nfa& nfa = dfa_.nfa();
  const size_t n = nfa.num_states();
  std::vector<uint32_t> rev_begin(n + 1, 0);
  auto string_byte = [](const Nfa::Edge& e) {
    // '"', '\\' and 0x7F alone are no part of a string character.
    return e.lo >= 0x20 && (e.lo != e.hi || (e.lo != '"' && e.lo != '\\' && e.lo != 0x7F));
  };
  for (uint32_t x = 0; x < n; ++x) {
    for (uint32_t y : nfa.eps(x)) ++rev_begin[y + 1];
    for (const Nfa::Edge& e : nfa.edges(x)) rev_begin[e.to + 1] += string_byte(e);
  }
  for (size_t i = 0; i < n; ++i) rev_begin[i + 1] += rev_begin[i];
  // rev: (from << 1 | weight) per reverse move.
  std::vector<uint32_t> rev(rev_begin[n]), fill(rev_begin.begin(), rev_begin.end() - 1);
  for (uint32_t x = 0; x < n; ++x) {
    for (uint32_t y : nfa.eps(x)) rev[fill[y]++] = x << 1;
    for (const Nfa::Edge& e : nfa.edges(x)) {
      if (string_byte(e)) rev[fill[e.to]++] = x << 1 | 1;
    }
  }
  control_dist_.assign(n, kFar);
  std::vector<uint32_t> cur, nxt;
  for (uint32_t x = 0; x < n; ++x) {
    bool bad = nfa.accept_lexeme(x) >= 0;
    for (const Nfa::Edge& e : nfa.edges(x)) bad = bad || e.lo < 0x20;
    if (bad) control_dist_[x] = 0, cur.push_back(x);
  }
  for (uint8_t d = 0; d < kFar && !cur.empty(); ++d) {
    // cur: the states at distance d (grows by the epsilon moves into it).
    nxt.clear();
    for (size_t k = 0; k < cur.size(); ++k) {
      const uint32_t y = cur[k];
      for (uint32_t r = rev_begin[y]; r < rev_begin[y + 1]; ++r) {
        const uint32_t x = rev[r] >> 1;
        const uint8_t dx = static_cast<uint8_t>(d + (rev[r] & 1));
        if (dx >= control_dist_[x]) continue;
        control_dist_[x] = dx;
        ((rev[r] & 1) ? nxt : cur).push_back(x);
      }
    }
    cur.swap(nxt);
  }
}

bool StringHorizon::controls_die(int32_t s, int max_chars) {
  if (control_dist_.empty() && dfa_.nfa().num_states() > 0) compute_control_distance();
  // A multi-byte character is up to 4 bytes: 4 * max_chars bytes cover max_chars characters.
  const int bytes = 4 * max_chars;
  SPINDLE_CHECK(bytes < kFar, "controls_die: {} characters is past the distances kept", max_chars);
  for (uint32_t x : dfa_.nfa_states(s)) {
    if (control_dist_[x] <= bytes) return false;
  }
  return true;
}

int StringHorizon::search(int32_t s) {
  const uint32_t stamp = ++stamp_;
  std::vector<int32_t> cur = {s}, nxt, succ;
  auto mark = [&](int32_t x) {
    const auto i = static_cast<size_t>(x);
    if (seen_.size() <= i) seen_.resize(std::max(dfa_.num_states(), i + 1), 0);
    if (seen_[i] == stamp) return false;
    seen_[i] = stamp;
    return true;
  };
  mark(s);
  int best = kUnbounded;  // the nearest fragile state found so far
  size_t visited = 1;
  for (int depth = 0; !cur.empty() && depth < best; ++depth) {
    nxt.clear();
    for (int32_t x : cur) {
      if (const int h = known(x); x != s && h >= 0) {
        // Its nearest fragile state is h further (a lower bound when h is one).
        if (h != kUnbounded) best = std::min(best, depth + h);
        continue;
      }
      succ.clear();
      if (!successors(x, succ)) {
        best = std::min(best, depth);
        continue;
      }
      for (int32_t t : succ) {
        if (mark(t)) nxt.push_back(t), ++visited;
      }
    }
    if (!nxt.empty() && (visited > kMaxVisited || dfa_.num_states() > budget_end_)) {
      // Unsearched states at depth + 1 and below.
      best = std::min(best, depth + 1);
      break;
    }
    cur.swap(nxt);
  }
  return best == kUnbounded ? kUnbounded : std::min(best, cap_);
}

int StringHorizon::part_bound(int32_t s) {
  std::vector<int> lexemes;
  for (uint32_t x : dfa_.nfa_states(s)) lexemes.push_back(dfa_.nfa().owner(x));
  std::sort(lexemes.begin(), lexemes.end());
  lexemes.erase(std::unique(lexemes.begin(), lexemes.end()), lexemes.end());
  if (lexemes.size() < 2) return -1;
  int h = -1;
  for (int l : lexemes) {
    if (h >= cap_) break;
    const int32_t part = dfa_.part_of(s, l);
    int p = known(part);
    if (p < 0) {
      p = search(part);
      const auto i = static_cast<size_t>(part);
      if (memo_.size() <= i) memo_.resize(std::max(dfa_.num_states(), i + 1), 0);
      memo_[i] = p + 1;
    }
    h = std::max(h, p);
  }
  return h;
}

int StringHorizon::of(int32_t s) {
  if (const int h = known(s); h >= 0 || s == LexerDfa::kDead) return s == LexerDfa::kDead ? -1 : h;
  budget_end_ = dfa_.num_states() + kMaxNewStates;
  int h = part_bound(s);
  // A part that survives a few characters already lets the short slices (most of the
  // vocabulary) in; a search of the whole set would build states for every part at once.
  if (h < kPartEnough) h = std::max(h, search(s));
  const auto i = static_cast<size_t>(s);
  if (memo_.size() <= i) memo_.resize(std::max(dfa_.num_states(), i + 1), 0);
  memo_[i] = h + 1;
  return h;
}

}  // namespace spindle::grammar
