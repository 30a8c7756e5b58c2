#include "grammar/matcher.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "grammar/string_horizon.h"
#include "util/error.h"

namespace spindle::grammar {

// Per lexer state: tokens that stay inside the current lexeme(s), and the trie nodes where the
// lexer dies after an accepting state (the parser decides there).
struct StateMasks {
  struct Exit {
    uint32_t trie;  // index into TokenizerInfo::tries()
    uint32_t node;
    int32_t plex;   // lexer state before the node's byte
  };
  int slices = 0;                      // slices 1..slices are within whole (not walked)
  std::vector<uint32_t> within_bits;   // [mask words] or empty when within_ids is used
  std::vector<TokenId> within_ids;     // when few tokens of the walked tries stay within
  std::vector<Exit> exits;             // grouped by plex (equal plex adjacent)
  std::vector<uint32_t> group_begin;   // [groups + 1] exits[group_begin[g] .. group_begin[g + 1])
};

// What the exits of one group (one plex) allow once the parser has taken the lexeme that ends
// there and the next lexeme starts in lexer state `start`: the tokens that stay inside that
// next lexeme, and the nodes where it ends in turn (walked with the parser, as exits).
struct ExitMasks {
  std::vector<TokenId> within_ids;
  std::vector<StateMasks::Exit> exits;
};

class MatcherCache {
 public:
  MatcherCache(const CompiledGrammar& g, const TokenizerInfo& t)
      : dfa(g.nfa(), g.limits().max_dfa_states), horizon(dfa, largest_finite_slice(t)),
        ascii_horizon(dfa, largest_finite_slice(t), true) {
    for (const std::string& text : g.special_tokens()) {
      for (TokenId id : t.special_ids(text)) special_ids.push_back(id);
    }
    std::sort(special_ids.begin(), special_ids.end());
  }
  // Every well-formed non-ASCII character read from s leads back to s (through live states).
  bool loops_on_utf8(int32_t s);
  LexerDfa dfa;
  StringHorizon horizon;
  StringHorizon ascii_horizon;  // over one-byte string characters only
  std::unordered_map<int32_t, std::unique_ptr<StateMasks>> masks;
  // Key: (lexer state << 32 | group) and the next lexeme's start state.
  struct ExitKey {
    uint64_t state_group;
    int32_t start;
    bool operator==(const ExitKey&) const = default;
  };
  struct ExitKeyHash {
    size_t operator()(const ExitKey& k) const {
      return std::hash<uint64_t>()(k.state_group * 0x9E3779B97F4A7C15ull ^ static_cast<uint32_t>(k.start));
    }
  };
  std::unordered_map<ExitKey, std::unique_ptr<ExitMasks>, ExitKeyHash> exit_masks;
  std::vector<int8_t> utf8_loop;  // [dfa states] -1 unknown, 0 / 1
  std::vector<TokenId> special_ids;  // sorted: the vocabulary's ids of the grammar's special tokens
  size_t cached_bytes = 0;
  static constexpr size_t kMaxCachedBytes = size_t{64} << 20;

 private:
  static int largest_finite_slice(const TokenizerInfo& t) {
    int cap = 0;
    for (int k = 1; k <= t.num_slices(); ++k) {
      if (t.slice_max_chars(k) != TokenizerInfo::kUnbounded) cap = std::max(cap, t.slice_max_chars(k));
    }
    return cap;
  }
};

bool MatcherCache::loops_on_utf8(int32_t s) {
  const auto i = static_cast<size_t>(s);
  if (utf8_loop.size() <= i) utf8_loop.resize(dfa.num_states() + 1, -1);
  if (utf8_loop[i] >= 0) return utf8_loop[i] != 0;
  // Lead bytes, the first continuation's range, then (n - 1) continuations 80-BF.
  struct Group {
    uint8_t lead_lo, lead_hi, lo, hi;
    int n;
  };
  static constexpr Group kGroups[] = {{0xC2, 0xDF, 0x80, 0xBF, 1}, {0xE0, 0xE0, 0xA0, 0xBF, 2},
                                      {0xE1, 0xEC, 0x80, 0xBF, 2}, {0xED, 0xED, 0x80, 0x9F, 2},
                                      {0xEE, 0xEF, 0x80, 0xBF, 2}, {0xF0, 0xF0, 0x90, 0xBF, 3},
                                      {0xF1, 0xF3, 0x80, 0xBF, 3}, {0xF4, 0xF4, 0x80, 0x8F, 3}};
  bool ok = true;
  std::vector<int32_t> cur, nxt;
  for (const Group& g : kGroups) {
    cur.clear();
    for (int b = g.lead_lo; b <= g.lead_hi; ++b) cur.push_back(dfa.next(s, static_cast<uint8_t>(b)));
    for (int k = 0; k < g.n && ok; ++k) {
      std::sort(cur.begin(), cur.end());
      cur.erase(std::unique(cur.begin(), cur.end()), cur.end());
      const int lo = k == 0 ? g.lo : 0x80, hi = k == 0 ? g.hi : 0xBF;
      nxt.clear();
      for (int32_t x : cur) {
        if (x == LexerDfa::kDead) ok = false;
        for (int b = lo; b <= hi && ok; ++b) nxt.push_back(dfa.next(x, static_cast<uint8_t>(b)));
      }
      cur.swap(nxt);
    }
    for (int32_t x : cur) ok = ok && x == s;
    if (!ok) break;
  }
  if (utf8_loop.size() <= i) utf8_loop.resize(dfa.num_states() + 1, -1);
  utf8_loop[i] = ok ? 1 : 0;
  return ok;
}

namespace {

void set_bit(uint32_t* mask, TokenId id) { mask[id >> 5] |= uint32_t{1} << (id & 31); }

// Every token of node i's subtree stays inside the lexeme from state s (the state after node
// i's byte): s loops on every byte below, or on the ASCII bytes below and on every non-ASCII
// character, the bytes below being well-formed UTF-8. Reads only the transitions of s it needs
// (a whole row would build states no walk reaches).
bool subtree_within(const TokenTrie& t, MatcherCache& cache, size_t i, const TokenTrie::WalkNode& n, int32_t s) {
  LexerDfa& dfa = cache.dfa;
  if (!dfa.loops_on(s, {n.ascii_below[0], n.ascii_below[1], 0, 0})) return false;
  if ((n.flags & TokenTrie::kNonAsciiBelow) == 0) return true;
  const auto& below = t.bytes_below(i);
  if (dfa.loops_on(s, {0, 0, below[2], below[3]})) return true;
  return (n.flags & TokenTrie::kUtf8Below) != 0 && cache.loops_on_utf8(s);
}

// Moves the within tokens of a finished walk into out: a bitmask, or a list when they are few
// (count: how many bits are set).
void store_within(std::vector<uint32_t>& bits, size_t count, StateMasks& out) {
  if (count >= bits.size()) {
    out.within_bits = std::move(bits);
    return;
  }
  for (size_t w = 0; w < bits.size(); ++w) {
    for (uint32_t x = bits[w]; x != 0; x &= x - 1) {
      out.within_ids.push_back(static_cast<TokenId>(w * 32 + static_cast<size_t>(std::countr_zero(x))));
    }
  }
}

using LexStack = std::vector<TokenTrie::WalkCursor<int32_t>>;

// A lexer walk's frame: the DFA state, and whether the path from the walk's root is one-byte
// string characters only (0x20-0x7E but '"' and '\\').
struct LexFrame {
  int32_t s;
  bool ascii;
};
using LexFrameStack = std::vector<TokenTrie::WalkCursor<LexFrame>>;

constexpr bool string_ascii(uint8_t b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }

// Only one-byte string characters on every path strictly below node n.
bool string_ascii_below(const TokenTrie::WalkNode& n) {
  constexpr uint64_t kNot0 = 0xFFFFFFFFull | (uint64_t{1} << '"');
  constexpr uint64_t kNot1 = (uint64_t{1} << ('\\' - 64)) | (uint64_t{1} << (0x7F - 64));
  return (n.flags & TokenTrie::kNonAsciiBelow) == 0 && (n.ascii_below[0] & kNot0) == 0 && (n.ascii_below[1] & kNot1) == 0;
}

// The lexer-only walk of one trie from lex: sets the bits of tokens staying inside the
// lexeme(s) and records the exit nodes; returns how many bits it set (sparse walks only). With
// `dense` the trie's bits are set first and rejected subtrees cleared (cheap when most tokens
// stay within, as inside a string); otherwise within tokens are set one by one. ascii_free: no
// one-byte string character string kills lex (StringHorizon over ASCII unbounded), so below a
// path of such characters every subtree of such characters stays within.
size_t walk_lexer(const TokenTrie& t, uint32_t trie, MatcherCache& cache, int32_t lex, bool dense, bool ascii_free,
                  std::vector<uint32_t>& bits, LexFrameStack& stack, StateMasks& out) {
  if (t.num_nodes() <= 1) return 0;
  if (dense) {
    const auto tb = t.token_bits();
    for (size_t w = 0; w < bits.size(); ++w) bits[w] |= tb[w];
  }
  const std::vector<TokenId>& tokens = t.tokens();
  size_t set_count = 0;
  auto mark = [&](uint32_t from, uint32_t to, bool on) {
    if (on) set_count += to - from;
    for (uint32_t k = from; k < to; ++k) {
      const uint32_t bit = uint32_t{1} << (tokens[k] & 31);
      uint32_t& w = bits[static_cast<size_t>(tokens[k]) >> 5];
      w = on ? (w | bit) : (w & ~bit);
    }
  };
  LexerDfa& dfa = cache.dfa;
  t.walk_below(0, LexFrame{lex, true}, stack, [&](uint32_t i, const TokenTrie::WalkNode& n, const LexFrame& p, LexFrame& c) {
    c.s = dfa.next(p.s, n.byte);
    if (c.s == LexerDfa::kDead) {
      if (dfa.accepting(p.s)) out.exits.push_back({trie, i, p.s});
      if (dense) mark(n.token_begin, n.token_end, false);
      return false;
    }
    c.ascii = p.ascii && string_ascii(n.byte);
    if ((n.flags & TokenTrie::kLeaf) != 0 || (ascii_free && c.ascii && string_ascii_below(n)) ||
        subtree_within(t, cache, i, n, c.s)) {
      if (!dense) mark(n.token_begin, n.token_end, true);
      return false;
    }
    if (!dense) mark(n.token_begin, t.walk_node(n.child_begin).token_begin, true);
    return true;
  });
  return set_count;
}

static_assert(StringHorizon::kUnbounded == TokenizerInfo::kUnbounded,
              "an unbounded horizon must take the unbounded slice");

// The masks of lexer state lex: the slices every string of lex's horizon covers are within
// whole; the other tries are walked.
std::unique_ptr<StateMasks> build_state_masks(const TokenizerInfo& t, MatcherCache& cache, int32_t lex) {
  auto out = std::make_unique<StateMasks>();
  const int horizon = cache.horizon.of(lex);
  while (out->slices < t.num_slices() && t.slice_max_chars(out->slices + 1) <= horizon) ++out->slices;
  // Dense (most walked tokens stay within) only where no slice is taken whole: with a
  // horizon the walked tries hold the tokens a string state mostly rejects (quotes, escapes,
  // controls), and a whole DFA row would be built to tell.
  bool dense = false;
  if (horizon < 1) {
    const auto& start_loop = cache.dfa.loop_bytes(lex);
    dense = std::popcount(start_loop[0]) + std::popcount(start_loop[1]) >= 48;
  }
  // Without a horizon (some character kills lex, as U+2028 kills a pattern's '.'), ASCII
  // subtrees may still all stay within.
  const bool ascii_free = horizon < 1 && cache.ascii_horizon.of(lex) == StringHorizon::kUnbounded;
  std::vector<uint32_t> bits(t.mask_words(), 0);
  LexFrameStack stack;
  size_t set_count = 0;
  // Tokens of a few such characters and then a control byte die there (no lexeme ends).
  const bool skip_control = cache.horizon.controls_die(lex, TokenizerInfo::kControlMaxPrefix);
  for (size_t k = 0; k < t.tries().size(); ++k) {
    if (k >= 1 && static_cast<int>(k) <= out->slices) continue;
    if (skip_control && static_cast<int>(k) == t.control_trie()) continue;
    set_count += walk_lexer(t.tries()[k], static_cast<uint32_t>(k), cache, lex, dense, ascii_free, bits, stack, *out);
  }
  store_within(bits, dense ? bits.size() : set_count, *out);
  std::stable_sort(out->exits.begin(), out->exits.end(),
                   [](const StateMasks::Exit& a, const StateMasks::Exit& b) { return a.plex < b.plex; });
  for (size_t k = 0; k < out->exits.size(); ++k) {
    if (k == 0 || out->exits[k].plex != out->exits[k - 1].plex) out->group_begin.push_back(static_cast<uint32_t>(k));
  }
  out->group_begin.push_back(static_cast<uint32_t>(out->exits.size()));
  return out;
}

// The lexer-only walk of the exits [begin, end) once the next lexeme starts in `start`: each
// exit node's byte is read from `start`, the nodes below from the states reached.
std::unique_ptr<ExitMasks> build_exit_masks(const TokenizerInfo& t, MatcherCache& cache, std::span<const StateMasks::Exit> exits,
                                            int32_t start, LexStack& stack) {
  auto out = std::make_unique<ExitMasks>();
  LexerDfa& dfa = cache.dfa;
  for (const StateMasks::Exit& e : exits) {
    const TokenTrie& trie = t.tries()[e.trie];
    // At the exit node itself the lexeme just taken may not be followed by an empty one (as
    // Matcher::step: one scan per byte), so a dead byte there records no exit.
    const int32_t s = dfa.next(start, trie.byte(e.node));
    if (s == LexerDfa::kDead) continue;
    for (TokenId id : trie.tokens_at(e.node)) out->within_ids.push_back(id);
    trie.walk_below(e.node, s, stack, [&](uint32_t i, const TokenTrie::WalkNode& n, int32_t p, int32_t& c) {
      c = dfa.next(p, n.byte);
      if (c == LexerDfa::kDead) {
        if (dfa.accepting(p)) out->exits.push_back({e.trie, i, p});
        return false;
      }
      for (TokenId id : trie.tokens_at(i)) out->within_ids.push_back(id);
      return true;
    });
  }
  return out;
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const TokenizerInfo> tokenizer)
    : g_(std::move(grammar)), tok_(std::move(tokenizer)), cache_(std::make_shared<MatcherCache>(*g_, *tok_)),
      chart_(g_.get()) {
  lex_ = lexer_start(0);
}

Matcher::Matcher(const Matcher& o)
    : g_(o.g_), tok_(o.tok_), cache_(o.cache_), chart_(o.chart_), set_start_(o.set_start_), set_(o.set_),
      lex_(o.lex_), terminated_(o.terminated_), started_(o.started_), history_(o.history_) {}

Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

Matcher Matcher::fork() const { return Matcher(*this); }

int32_t Matcher::lexer_start(uint32_t set) {
  if (set_start_.size() < chart_.num_sets()) set_start_.resize(chart_.num_sets(), -1);
  int32_t& s = set_start_[set];
  if (s < 0) {
    const std::vector<int> lexemes = chart_.expected_lexemes(set);
    s = cache_->dfa.start(lexemes);
  }
  return s;
}

bool Matcher::step(uint32_t& set, int32_t& lex, uint8_t b, bool memo) {
  LexerDfa& dfa = cache_->dfa;
  int32_t t = dfa.next(lex, b);
  if (t != LexerDfa::kDead) {
    lex = t;
    return true;
  }
  if (!dfa.accepting(lex)) return false;
  const int32_t j = memo ? scan_from(set, lex) : chart_.scan(set, dfa.accepts(lex));
  if (j < 0) return false;
  t = dfa.next(lexer_start(static_cast<uint32_t>(j)), b);
  if (t == LexerDfa::kDead) return false;
  set = static_cast<uint32_t>(j);
  lex = t;
  return true;
}

bool Matcher::complete_at(uint32_t set, int32_t lex, bool started) {
  if (!started && chart_.accepts(set)) return true;
  LexerDfa& dfa = cache_->dfa;
  if (!dfa.accepting(lex)) return false;
  const size_t base = chart_.num_sets();
  const int32_t j = chart_.scan(set, dfa.accepts(lex));
  const bool ok = j >= 0 && chart_.accepts(static_cast<uint32_t>(j));
  chart_.truncate(base);
  return ok;
}

void Matcher::restore(const Snapshot& s) {
  chart_.truncate(s.num_sets);
  if (set_start_.size() > s.num_sets) set_start_.resize(s.num_sets);
  set_ = s.set;
  lex_ = s.lex;
  terminated_ = s.terminated;
  started_ = s.started;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  const Snapshot before{static_cast<uint32_t>(chart_.num_sets()), set_, lex_, terminated_, started_};
  for (char c : bytes) {
    if (!step(set_, lex_, static_cast<uint8_t>(c), false)) {
      restore(before);
      return false;
    }
    started_ = true;
  }
  history_.push_back(before);
  return true;
}

bool Matcher::accept_token(TokenId id) {
  if (terminated_) return false;
  if (tok_->is_eos(id)) {
    if (!is_complete()) return false;
    history_.push_back({static_cast<uint32_t>(chart_.num_sets()), set_, lex_, terminated_, started_});
    terminated_ = true;
    return true;
  }
  const std::string* bytes = token_bytes(id);
  return bytes != nullptr && accept_bytes(*bytes);
}

const std::string* Matcher::token_bytes(TokenId id) const {
  if (const std::string* bytes = tok_->grammar_bytes(id)) return bytes;
  const std::vector<TokenId>& special = cache_->special_ids;
  if (!std::binary_search(special.begin(), special.end(), id)) return nullptr;
  return &tok_->vocab().token_bytes[static_cast<size_t>(id)];
}

void Matcher::rollback(int n) {
  SPINDLE_CHECK(n >= 0 && n <= num_tokens(), "cannot roll back {} tokens: the matcher has {}", n, num_tokens());
  if (n == 0) return;
  restore(history_[history_.size() - static_cast<size_t>(n)]);
  history_.resize(history_.size() - static_cast<size_t>(n));
}

bool Matcher::is_complete() { return terminated_ || complete_at(set_, lex_, started_); }

std::bitset<256> Matcher::allowed_bytes() {
  std::bitset<256> out;
  if (terminated_) return out;
  const size_t base = chart_.num_sets();
  for (int b = 0; b < 256; ++b) {
    uint32_t set = set_;
    int32_t lex = lex_;
    if (step(set, lex, static_cast<uint8_t>(b), true)) out.set(static_cast<size_t>(b));
  }
  chart_.truncate(base);
  scan_memo_.clear();
  return out;
}

bool Matcher::can_only_end() { return is_complete() && allowed_bytes().none(); }

std::string Matcher::forced_bytes(size_t max_bytes) {
  std::string out;
  if (terminated_) return out;
  const size_t base = chart_.num_sets();
  uint32_t set = set_;
  int32_t lex = lex_;
  while (out.size() < max_bytes && !complete_at(set, lex, started_ || !out.empty())) {
    int only = -1;
    for (int b = 0; b < 256 && only != -2; ++b) {
      uint32_t s2 = set;
      int32_t l2 = lex;
      if (step(s2, l2, static_cast<uint8_t>(b), true)) only = only == -1 ? b : -2;
    }
    if (only < 0) break;
    scan_memo_.clear();  // the next round scans from other sets
    step(set, lex, static_cast<uint8_t>(only), false);
    out += static_cast<char>(only);
  }
  chart_.truncate(base);
  if (set_start_.size() > base) set_start_.resize(base);
  scan_memo_.clear();
  return out;
}

void Matcher::walk_subtree(const TokenTrie& t, uint32_t root, Frame parent, uint32_t* mask) {
  if (!step(parent.set, parent.lex, t.byte(root), true)) return;
  for (TokenId id : t.tokens_at(root)) set_bit(mask, id);
  t.walk_below(root, parent, frames_, [&](uint32_t i, const TokenTrie::WalkNode& n, const Frame& p, Frame& c) {
    c = p;
    if (!step(c.set, c.lex, n.byte, true)) return false;
    for (TokenId id : t.tokens_at(i)) set_bit(mask, id);
    return true;
  });
}

void Matcher::fill_from(uint32_t set, int32_t lex, uint32_t* mask) {
  const TokenizerInfo& t = *tok_;
  MatcherCache& cache = *cache_;
  auto it = cache.masks.find(lex);
  StateMasks* sm = it != cache.masks.end() ? it->second.get() : nullptr;
  std::unique_ptr<StateMasks> fresh;
  if (sm == nullptr) {
    fresh = build_state_masks(t, cache, lex);
    const size_t bytes = fresh->within_bits.size() * 4 + fresh->within_ids.size() * 4 +
                         fresh->exits.size() * sizeof(StateMasks::Exit);
    sm = fresh.get();
    if (cache.cached_bytes + bytes <= MatcherCache::kMaxCachedBytes) {
      cache.cached_bytes += bytes;
      cache.masks.emplace(lex, std::move(fresh));
    }
  }
  if (sm->slices > 0) {
    const auto prefix = t.slice_prefix_bits(sm->slices);
    std::memcpy(mask, prefix.data(), prefix.size() * sizeof(uint32_t));
    for (size_t w = 0; w < sm->within_bits.size(); ++w) mask[w] |= sm->within_bits[w];
  } else if (!sm->within_bits.empty()) {
    std::memcpy(mask, sm->within_bits.data(), sm->within_bits.size() * sizeof(uint32_t));
  }
  for (TokenId id : sm->within_ids) set_bit(mask, id);
  // Per group of exits (one plex): the parser takes the lexeme once; what the next lexeme
  // allows below the exit nodes is cached per (lex, group, its start state).
  const std::span<const StateMasks::Exit> exits = sm->exits;
  for (size_t g = 0; g + 1 < sm->group_begin.size(); ++g) {
    const std::span<const StateMasks::Exit> group =
        exits.subspan(sm->group_begin[g], sm->group_begin[g + 1] - sm->group_begin[g]);
    const int32_t plex = group.front().plex;
    const int32_t j = scan_from(set, plex);
    if (j < 0) continue;
    const int32_t start = lexer_start(static_cast<uint32_t>(j));
    const MatcherCache::ExitKey key{(uint64_t{static_cast<uint32_t>(lex)} << 32) | g, start};
    auto it2 = cache.exit_masks.find(key);
    ExitMasks* em = it2 != cache.exit_masks.end() ? it2->second.get() : nullptr;
    std::unique_ptr<ExitMasks> fresh_em;
    if (em == nullptr) {
      fresh_em = build_exit_masks(t, cache, group, start, walk_state_);
      em = fresh_em.get();
      const size_t bytes = em->within_ids.size() * 4 + em->exits.size() * sizeof(StateMasks::Exit) + 64;
      if (cache.cached_bytes + bytes <= MatcherCache::kMaxCachedBytes) {
        cache.cached_bytes += bytes;
        cache.exit_masks.emplace(key, std::move(fresh_em));
      }
    }
    for (TokenId id : em->within_ids) set_bit(mask, id);
    for (const StateMasks::Exit& e : em->exits) {
      // Walks the node's subtree with the parser from (e.plex, j): the next lexeme ends here.
      walk_subtree(t.tries()[e.trie], e.node, Frame{e.plex, static_cast<uint32_t>(j)}, mask);
    }
  }
}

int32_t Matcher::scan_from(uint32_t set, int32_t lex) {
  const uint64_t key = (uint64_t{set} << 32) | static_cast<uint32_t>(lex);
  auto it = scan_memo_.find(key);
  if (it != scan_memo_.end()) return it->second;
  const int32_t j = chart_.scan(set, cache_->dfa.accepts(lex));
  scan_memo_.emplace(key, j);
  return j;
}

void Matcher::fill_mask(std::span<uint32_t> mask) {
  const TokenizerInfo& t = *tok_;
  SPINDLE_CHECK(mask.size() >= t.mask_words(), "mask has {} words, the vocabulary needs {}", mask.size(),
                t.mask_words());
  std::memset(mask.data(), 0, mask.size() * sizeof(uint32_t));
  if (terminated_) {
    for (TokenId id : t.vocab().eos_ids) set_bit(mask.data(), id);
    return;
  }
  const size_t base = chart_.num_sets();
  MatcherCache& cache = *cache_;
  uint32_t set = set_;
  int32_t lex = lex_;
  bool any = true;
  if (cache.dfa.accepting(lex) && cache.dfa.dead_end(lex)) {
    // Every next byte ends the lexeme: the tokens are those of the state after the scan (one
    // parser step here instead of one per exit node of lex's masks).
    const int32_t j = chart_.scan(set, cache.dfa.accepts(lex));
    any = j >= 0;
    if (any) set = static_cast<uint32_t>(j), lex = lexer_start(set);
  }
  if (any) fill_from(set, lex, mask.data());
  for (TokenId id : cache.special_ids) {
    // An allowed special token: its text stepped byte by byte from the current state.
    uint32_t s = set_;
    int32_t l = lex_;
    bool ok = true;
    for (char c : tok_->vocab().token_bytes[static_cast<size_t>(id)]) {
      if (!(ok = step(s, l, static_cast<uint8_t>(c), true))) break;
    }
    if (ok) set_bit(mask.data(), id);
  }
  chart_.truncate(base);
  if (set_start_.size() > base) set_start_.resize(base);
  scan_memo_.clear();
  if (complete_at(set_, lex_, started_)) {
    for (TokenId id : t.vocab().eos_ids) set_bit(mask.data(), id);
  }
}

}  // namespace spindle::grammar
