#include "grammar/string_horizon.h"

#include <algorithm>

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
  // Every well-formed multi-byte character.
  if (ok) ok = dfa_.utf8_char_targets(s, res);
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

bool StringHorizon::control_dead_state(int32_t s) {
  if (dfa_.accepting(s)) return false;
  for (int b = 0; b < 0x20; ++b) {
    if (dfa_.next(s, static_cast<uint8_t>(b)) != LexerDfa::kDead) return false;
  }
  return true;
}

int StringHorizon::search(int32_t s, bool& exact, int* control_dead) {
  exact = true;
  bool ctrl = control_dead != nullptr;
  if (ctrl) *control_dead = 0;
  // The frontier after `level` characters is a function of the one before: when it repeats a
  // frontier already seen (no state having died on the way), every length survives.
  std::vector<std::vector<int32_t>> seen = {{s}};
  std::vector<int32_t> next;
  for (int level = 1; level <= cap_; ++level) {
    if (ctrl) {
      for (int32_t x : seen.back()) ctrl = ctrl && control_dead_state(x);
      if (ctrl) *control_dead = level;
    }
    next.clear();
    for (int32_t x : seen.back()) {
      if (!successors(x, next)) return level - 1;
    }
    sort_unique(next);
    if (std::find(seen.begin(), seen.end(), next) != seen.end()) {
      // Every later frontier repeats one already checked.
      if (ctrl) {
        for (int32_t x : next) ctrl = ctrl && control_dead_state(x);
        if (ctrl) *control_dead = cap_ + 1;
      }
      return kUnbounded;
    }
    if (next.size() > kMaxFrontier || dfa_.num_states() > budget_end_) {
      exact = false;
      return level;
    }
    seen.push_back(next);
  }
  return cap_;
}

int StringHorizon::control_dead_of(int32_t s) {
  of(s);
  return control_memo_[static_cast<size_t>(s)];
}

int StringHorizon::of(int32_t s) {
  const auto i = static_cast<size_t>(s);
  if (memo_.size() <= i) memo_.resize(std::max(dfa_.num_states(), i + 1), 0);
  if (memo_[i] != 0) return memo_[i] - 1;
  bool exact = true;
  budget_end_ = dfa_.num_states() + kMaxNewStates;
  int control_dead = 0;
  int h = s == LexerDfa::kDead ? -1 : search(s, exact, &control_dead);
  if (!exact) {
    // A set survives wherever one of its members does: the best member alone is a lower bound.
    const std::vector<uint32_t> members(dfa_.nfa_states(s).begin(), dfa_.nfa_states(s).end());
    for (uint32_t x : members) {
      if (h >= cap_ || dfa_.num_states() > budget_end_) break;
      if (nfa_memo_.size() <= x) nfa_memo_.resize(x + 1, 0);
      if (nfa_memo_[x] == 0) {
        const int32_t one = dfa_.state_of(x);
        bool e = true;
        nfa_memo_[x] = (one == LexerDfa::kDead || one == s ? -1 : search(one, e)) + 1;
      }
      h = std::max(h, nfa_memo_[x] - 1);
    }
  }
  if (memo_.size() <= i) memo_.resize(dfa_.num_states(), 0);
  if (control_memo_.size() < memo_.size()) control_memo_.resize(memo_.size(), 0);
  memo_[i] = h + 1;
  control_memo_[i] = control_dead;
  return h;
}

}  // namespace spindle::grammar
