#include "grammar/lexer.h"

#include <algorithm>

#include "util/error.h"
#include "util/utf8.h"

namespace spindle::grammar {
namespace {

constexpr char32_t kUtf8Bounds[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

// Splits [lo, hi] (all of one UTF-8 length) into pieces whose encodings are a sequence of byte
// ranges, and calls emit(lo_bytes, hi_bytes, len) for each.
template <typename Emit>
void split_utf8(char32_t lo, char32_t hi, Emit&& emit) {
  for (int i = 1; i < 4; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_utf8(lo, lo | m, emit);
        split_utf8((lo | m) + 1, hi, emit);
        return;
      }
      if ((hi & m) != m) {
        split_utf8(lo, (hi & ~m) - 1, emit);
        split_utf8(hi & ~m, hi, emit);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  const int n = encode_utf8(lo, a);
  encode_utf8(hi, b);
  emit(a, b, n);
}

}  // namespace

uint32_t Nfa::new_state() {
  SPINDLE_CHECK(accept_.size() < max_states_,
                "grammar too large: its lexer needs more than {} automaton states (simplify the "
                "schema, pattern or repetition counts)", max_states_);
  accept_.push_back(-1);
  return static_cast<uint32_t>(accept_.size() - 1);
}

void Nfa::add_lexeme(const RegexNode& re, int lexeme) {
  const size_t first = accept_.size();
  const Fragment f = build(re);
  const uint32_t done = new_state();
  owner_.resize(accept_.size(), lexeme);
  std::fill(owner_.begin() + static_cast<long>(first), owner_.end(), lexeme);
  accept_[done] = lexeme;
  eps(f.end, done);
  if (starts_.size() <= static_cast<size_t>(lexeme)) starts_.resize(static_cast<size_t>(lexeme) + 1);
  starts_[static_cast<size_t>(lexeme)] = f.start;
}

void Nfa::add_byte_path(uint32_t from, uint32_t to, const uint8_t* lo, const uint8_t* hi, int len) {
  uint32_t cur = from;
  for (int i = 0; i < len; ++i) {
    const uint32_t nxt = i + 1 == len ? to : new_state();
    edge(cur, lo[i], hi[i], nxt);
    cur = nxt;
  }
}

Nfa::Fragment Nfa::build_chars(const std::vector<CodeRange>& ranges) {
  const uint32_t s = new_state();
  const uint32_t e = new_state();
  for (const CodeRange& r : ranges) {
    char32_t lo = r.lo;
    for (char32_t bound : kUtf8Bounds) {
      if (lo > r.hi) break;
      if (lo > bound) continue;
      const char32_t hi = std::min(r.hi, bound);
      // Surrogates are not UTF-8.
      auto emit = [&](const uint8_t* a, const uint8_t* b, int n) { add_byte_path(s, e, a, b, n); };
      if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800) split_utf8(lo, 0xD7FF, emit);
        if (hi > 0xDFFF) split_utf8(0xE000, hi, emit);
      } else {
        split_utf8(lo, hi, emit);
      }
      lo = hi + 1;
    }
  }
  return {s, e};
}

Nfa::Fragment Nfa::build_repeat(const RegexNode& re) {
  const RegexNode& child = *re.children[0];
  const uint32_t s = new_state();
  uint32_t cur = s;
  for (int i = 0; i < re.min; ++i) {
    const Fragment f = build(child);
    eps(cur, f.start);
    cur = f.end;
  }
  if (re.max < 0) {
    const uint32_t loop = new_state();
    eps(cur, loop);
    const Fragment f = build(child);
    eps(loop, f.start);
    eps(f.end, loop);
    return {s, loop};
  }
  const uint32_t e = new_state();
  for (int i = re.min; i < re.max; ++i) {
    eps(cur, e);
    const Fragment f = build(child);
    eps(cur, f.start);
    cur = f.end;
  }
  eps(cur, e);
  return {s, e};
}

Nfa::Fragment Nfa::build(const RegexNode& re) {
  switch (re.kind) {
    case RegexNode::Kind::kEmpty: {
      const uint32_t s = new_state();
      return {s, s};
    }
    case RegexNode::Kind::kChars:
      return build_chars(re.ranges);
    case RegexNode::Kind::kBytes: {
      const uint32_t s = new_state();
      const uint32_t e = new_state();
      for (const CodeRange& r : re.ranges) {
        edge(s, static_cast<uint8_t>(r.lo), static_cast<uint8_t>(r.hi), e);
      }
      return {s, e};
    }
    case RegexNode::Kind::kConcat: {
      Fragment f = build(*re.children[0]);
      for (size_t i = 1; i < re.children.size(); ++i) {
        const Fragment g = build(*re.children[i]);
        eps(f.end, g.start);
        f.end = g.end;
      }
      return f;
    }
    case RegexNode::Kind::kAlt: {
      const uint32_t s = new_state();
      const uint32_t e = new_state();
      for (const RegexPtr& c : re.children) {
        const Fragment g = build(*c);
        eps(s, g.start);
        eps(g.end, e);
      }
      return {s, e};
    }
    case RegexNode::Kind::kRepeat:
      return build_repeat(re);
  }
  SPINDLE_FAIL("unknown regex node");
}

void Nfa::finalize() {
  const size_t n = accept_.size();
  // Reverse reachability from the accepting states (reverse adjacency in CSR form).
  std::vector<uint32_t> rev_begin(n + 1, 0);
  for (const auto& [from, e] : build_edges_) ++rev_begin[e.to + 1];
  for (const auto& [from, to] : build_eps_) ++rev_begin[to + 1];
  for (size_t i = 0; i < n; ++i) rev_begin[i + 1] += rev_begin[i];
  std::vector<uint32_t> rev(rev_begin[n]);
  {
    std::vector<uint32_t> fill(rev_begin.begin(), rev_begin.end() - 1);
    for (const auto& [from, e] : build_edges_) rev[fill[e.to]++] = from;
    for (const auto& [from, to] : build_eps_) rev[fill[to]++] = from;
  }
  live_.assign(n, 0);
  std::vector<uint32_t> work;
  for (uint32_t s = 0; s < n; ++s) {
    if (accept_[s] >= 0) live_[s] = 1, work.push_back(s);
  }
  while (!work.empty()) {
    const uint32_t s = work.back();
    work.pop_back();
    for (uint32_t i = rev_begin[s]; i < rev_begin[s + 1]; ++i) {
      if (!live_[rev[i]]) live_[rev[i]] = 1, work.push_back(rev[i]);
    }
  }
  // Forward CSR of the live part, each state's moves in insertion order.
  edge_begin_.assign(n + 1, 0);
  eps_begin_.assign(n + 1, 0);
  for (const auto& [from, e] : build_edges_) {
    if (live_[from] && live_[e.to]) ++edge_begin_[from + 1];
  }
  for (const auto& [from, to] : build_eps_) {
    if (live_[from] && live_[to]) ++eps_begin_[from + 1];
  }
  for (size_t i = 0; i < n; ++i) edge_begin_[i + 1] += edge_begin_[i], eps_begin_[i + 1] += eps_begin_[i];
  edges_.resize(edge_begin_[n]);
  eps_.resize(eps_begin_[n]);
  std::vector<uint32_t> fe(edge_begin_.begin(), edge_begin_.end() - 1), fp(eps_begin_.begin(), eps_begin_.end() - 1);
  for (const auto& [from, e] : build_edges_) {
    if (live_[from] && live_[e.to]) edges_[fe[from]++] = e;
  }
  for (const auto& [from, to] : build_eps_) {
    if (live_[from] && live_[to]) eps_[fp[from]++] = to;
  }
  build_edges_ = {};
  build_eps_ = {};
}

LexerDfa::LexerDfa(const Nfa& nfa, size_t max_states) : nfa_(nfa), max_states_(max_states) {
  mark_.assign(nfa.num_states(), 0);
  // Byte classes: a new class starts at every edge's lo and after every edge's hi.
  std::array<uint8_t, 257> cut{};
  cut[0] = 1;
  for (uint32_t x = 0; x < nfa.num_states(); ++x) {
    for (const Nfa::Edge& e : nfa.edges(x)) cut[e.lo] = 1, cut[e.hi + 1u] = 1;
  }
  for (int b = 0; b < 256; ++b) {
    if (cut[static_cast<size_t>(b)]) class_rep_[num_classes_++] = static_cast<uint8_t>(b);
    byte_class_[static_cast<size_t>(b)] = static_cast<uint8_t>(num_classes_ - 1);
  }
  std::vector<uint32_t> none;
  intern(none);  // state 0: dead
}

void LexerDfa::closure(std::vector<uint32_t>& states) {
  for (uint32_t s : states) mark_[s] = 1;
  for (size_t i = 0; i < states.size(); ++i) {
    for (uint32_t t : nfa_.eps(states[i])) {
      if (!mark_[t]) mark_[t] = 1, states.push_back(t);
    }
  }
  for (uint32_t s : states) mark_[s] = 0;
}

int32_t LexerDfa::intern(std::vector<uint32_t>& states) {
  // Only states with byte edges or an accept matter for behaviour.
  std::erase_if(states, [&](uint32_t s) { return nfa_.edges(s).empty() && nfa_.accept_lexeme(s) < 0; });
  std::sort(states.begin(), states.end());
  states.erase(std::unique(states.begin(), states.end()), states.end());
  const std::string_view key(reinterpret_cast<const char*>(states.data()), states.size() * sizeof(uint32_t));
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  SPINDLE_CHECK(sets_.size() < max_states_,
                "grammar too complex: its lexer needs more than {} DFA states", max_states_);
  const auto id = static_cast<int32_t>(sets_.size());
  std::vector<int> acc;
  for (uint32_t s : states) {
    if (nfa_.accept_lexeme(s) >= 0) acc.push_back(nfa_.accept_lexeme(s));
  }
  std::sort(acc.begin(), acc.end());
  acc.erase(std::unique(acc.begin(), acc.end()), acc.end());
  index_.emplace(std::string(key), id);
  sets_.push_back(states);
  accepts_.push_back(std::move(acc));
  trans_.resize(trans_.size() + num_classes_, id == 0 ? kDead : -1);
  return id;
}

int32_t LexerDfa::start(std::span<const int> lexemes) {
  std::string key(reinterpret_cast<const char*>(lexemes.data()), lexemes.size() * sizeof(int));
  auto it = start_index_.find(key);
  if (it != start_index_.end()) return it->second;
  std::vector<uint32_t> states;
  for (int l : lexemes) {
    const uint32_t s = nfa_.lexeme_start(l);
    if (nfa_.live(s)) states.push_back(s);
  }
  closure(states);
  const int32_t id = intern(states);
  start_index_.emplace(std::move(key), id);
  return id;
}

int32_t LexerDfa::state_of(uint32_t x) {
  std::vector<uint32_t> states = {x};
  closure(states);
  return intern(states);
}

int32_t LexerDfa::part_of(int32_t s, int lexeme) {
  std::vector<uint32_t> states;
  for (uint32_t x : sets_[static_cast<size_t>(s)]) {
    if (nfa_.owner(x) == lexeme) states.push_back(x);
  }
  return intern(states);
}

bool LexerDfa::advance_ranges(const std::vector<uint32_t>& from, std::span<const std::pair<uint8_t, uint8_t>> ranges,
                              std::vector<int32_t>& out) {
  const int lo = ranges[0].first, hi = ranges[0].second;
  // Bytes between consecutive edge bounds (clipped to [lo, hi]) reach the same set.
  std::vector<uint16_t> cuts = {static_cast<uint16_t>(lo), static_cast<uint16_t>(hi + 1)};
  for (uint32_t st : from) {
    for (const Nfa::Edge& e : nfa_.edges(st)) {
      if (e.lo > lo && e.lo <= hi) cuts.push_back(e.lo);
      if (e.hi + 1 > lo && e.hi < hi) cuts.push_back(static_cast<uint16_t>(e.hi + 1));
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<uint32_t> next;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const int b = cuts[k];
    move_on(from, static_cast<uint8_t>(b), next);
    if (next.empty()) return false;
    if (ranges.size() == 1) {
      out.push_back(intern_sorted(next));
    } else if (!advance_ranges(next, ranges.subspan(1), out)) {
      return false;
    }
  }
  return true;
}

bool LexerDfa::utf8_char_targets(int32_t s, std::vector<int32_t>& out) {
  using R = std::pair<uint8_t, uint8_t>;
  // Unicode's table 3-7 (well-formed byte sequences), one row per lead-byte range.
  static constexpr R kRows[][4] = {{{0xC2, 0xDF}, {0x80, 0xBF}},
                                   {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
                                   {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
                                   {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
                                   {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
                                   {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
                                   {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
                                   {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}}};
  static constexpr size_t kLen[] = {2, 3, 3, 3, 3, 4, 4, 4};
  const std::vector<uint32_t> from = sets_[static_cast<size_t>(s)];
  for (size_t r = 0; r < std::size(kRows); ++r) {
    if (!advance_ranges(from, std::span<const R>(kRows[r], kLen[r]), out)) return false;
  }
  return true;
}

const std::array<uint64_t, 4>& LexerDfa::compute_loop_bytes(int32_t s) {
  if (loops_.size() < sets_.size()) loops_.resize(sets_.size(), {0, 0, 0, 0}), loops_known_.resize(sets_.size(), 0);
  const auto i = static_cast<size_t>(s);
  if (!loops_known_[i]) {
    std::array<uint64_t, 4> bits = {0, 0, 0, 0};
    for (int b = 0; b < 256; ++b) {
      if (next(s, static_cast<uint8_t>(b)) == s) bits[b >> 6] |= uint64_t{1} << (b & 63);
    }
    if (loops_.size() < sets_.size()) loops_.resize(sets_.size(), {0, 0, 0, 0}), loops_known_.resize(sets_.size(), 0);
    loops_[i] = bits;
    loops_known_[i] = 1;
  }
  return loops_[i];
}

std::span<const uint32_t> LexerDfa::important_closure(uint32_t x) {
  if (closure_at_.empty()) closure_at_.assign(nfa_.num_states(), 0);
  if (closure_at_[x] == 0) {
    std::vector<uint32_t> states = {x};
    closure(states);
    std::erase_if(states, [&](uint32_t y) { return nfa_.edges(y).empty() && nfa_.accept_lexeme(y) < 0; });
    std::sort(states.begin(), states.end());
    closure_at_[x] = static_cast<uint32_t>(closure_pool_.size()) + 1;
    closure_pool_.push_back(static_cast<uint32_t>(states.size()));
    closure_pool_.insert(closure_pool_.end(), states.begin(), states.end());
  }
  const size_t at = closure_at_[x] - 1;
  return {closure_pool_.data() + at + 1, closure_pool_[at]};
}

void LexerDfa::move_on(std::span<const uint32_t> from, uint8_t b, std::vector<uint32_t>& out) {
  // in_out_ (not mark_, which important_closure's closure uses) keeps out unique.
  if (in_out_.empty()) in_out_.assign(nfa_.num_states(), 0);
  out.clear();
  for (uint32_t st : from) {
    for (const Nfa::Edge& e : nfa_.edges(st)) {
      if (e.lo > b || b > e.hi) continue;
      for (uint32_t y : important_closure(e.to)) {
        if (!in_out_[y]) in_out_[y] = 1, out.push_back(y);
      }
    }
  }
  for (uint32_t y : out) in_out_[y] = 0;
  std::sort(out.begin(), out.end());
}

int32_t LexerDfa::intern_sorted(const std::vector<uint32_t>& states) {
  const std::string_view key(reinterpret_cast<const char*>(states.data()), states.size() * sizeof(uint32_t));
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  std::vector<uint32_t> copy = states;
  return intern(copy);
}

int32_t LexerDfa::compute(int32_t s, uint8_t b) {
  // Every byte of b's class moves each NFA state alike: one move fills the row's entry.
  std::vector<uint32_t>& next = scratch_;
  move_on(sets_[static_cast<size_t>(s)], b, next);
  const int32_t t = intern_sorted(next);
  trans_[static_cast<size_t>(s) * num_classes_ + byte_class_[b]] = t;
  return t;
}

}  // namespace spindle::grammar
