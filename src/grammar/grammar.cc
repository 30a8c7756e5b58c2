#include "grammar/grammar.h"

#include <algorithm>
#include <chrono>

#include "util/error.h"

namespace spindle::grammar {

Grammar::Grammar() = default;

int32_t Grammar::lexeme(const RegexPtr& re) {
  std::string key = regex_key(*re);
  auto it = lexeme_index_.find(key);
  if (it != lexeme_index_.end()) return lexeme_symbol(it->second);
  const auto id = static_cast<int32_t>(lexemes_.size());
  lexemes_.push_back(re);
  lexeme_index_.emplace(std::move(key), id);
  return lexeme_symbol(id);
}

int32_t Grammar::add_nonterminal(std::string name) {
  names_.push_back(std::move(name));
  return static_cast<int32_t>(names_.size() - 1);
}

void Grammar::add_production(int32_t lhs, std::vector<int32_t> rhs) {
  SPINDLE_CHECK(productions_.size() < max_productions_,
                "grammar too large: more than {} productions", max_productions_);
  productions_.push_back({lhs, std::move(rhs)});
}

int32_t Grammar::repeat(int32_t symbol, int min, int max, std::string_view name) {
  SPINDLE_CHECK(min >= 0 && (max < 0 || max >= min), "bad repetition {{{},{}}}", min, max);
  const int32_t nt = add_nonterminal(std::string(name));
  if (max < 0) {
    // nt -> sym{min} star; star -> star sym | ε (left recursion: cheap for Earley)
    const int32_t star = add_nonterminal(std::string(name) + "*");
    add_production(star, {});
    add_production(star, {star, symbol});
    std::vector<int32_t> rhs(static_cast<size_t>(min), symbol);
    rhs.push_back(star);
    add_production(nt, std::move(rhs));
    return nt;
  }
  // tail_k derives sym{0, k}: tail_k -> ε | sym tail_{k-1}
  int32_t tail = -1;
  for (int k = 1; k <= max - min; ++k) {
    const int32_t t = add_nonterminal(fmt::format("{}~{}", name, k));
    add_production(t, {});
    add_production(t, tail < 0 ? std::vector<int32_t>{symbol} : std::vector<int32_t>{symbol, tail});
    tail = t;
  }
  std::vector<int32_t> rhs(static_cast<size_t>(min), symbol);
  if (tail >= 0) rhs.push_back(tail);
  add_production(nt, std::move(rhs));
  return nt;
}

int32_t Grammar::choice(std::vector<std::vector<int32_t>> sequences, std::string_view name) {
  const int32_t nt = add_nonterminal(std::string(name));
  for (auto& s : sequences) add_production(nt, std::move(s));
  return nt;
}

void Grammar::allow_special_token(std::string text) {
  SPINDLE_CHECK(!text.empty(), "an allowed special token needs its text");
  if (std::find(special_tokens_.begin(), special_tokens_.end(), text) == special_tokens_.end()) {
    special_tokens_.push_back(std::move(text));
  }
}

int32_t Grammar::embed(const Grammar& other) {
  SPINDLE_CHECK(other.start_ >= 0, "embedded grammar has no start symbol");
  for (const std::string& s : other.special_tokens_) allow_special_token(s);
  const auto base = static_cast<int32_t>(names_.size());
  for (const std::string& name : other.names_) add_nonterminal(name);
  std::vector<int32_t> lexeme_map(other.lexemes_.size());
  for (size_t i = 0; i < other.lexemes_.size(); ++i) lexeme_map[i] = lexeme(other.lexemes_[i]);
  for (const Production& p : other.productions_) {
    std::vector<int32_t> rhs;
    rhs.reserve(p.rhs.size());
    for (int32_t s : p.rhs) rhs.push_back(is_lexeme(s) ? lexeme_map[static_cast<size_t>(lexeme_of(s))] : base + s);
    add_production(base + p.lhs, std::move(rhs));
  }
  return base + other.start_;
}

std::string Grammar::to_string() const {
  std::string out;
  for (const Production& p : productions_) {
    out += names_[static_cast<size_t>(p.lhs)] + " ::=";
    for (int32_t s : p.rhs) {
      out += " ";
      out += is_lexeme(s) ? "<" + regex_key(*lexemes_[static_cast<size_t>(lexeme_of(s))]) + ">"
                          : names_[static_cast<size_t>(s)];
    }
    out += "\n";
  }
  return out;
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const Grammar& g, const CompileLimits& limits) {
  const auto t0 = std::chrono::steady_clock::now();
  SPINDLE_CHECK(g.start() >= 0, "grammar has no start rule");
  std::shared_ptr<CompiledGrammar> c(new CompiledGrammar(limits.max_nfa_states));
  c->limits_ = limits;
  const size_t num_nt = g.num_nonterminals() + 1;  // + S'
  const auto aug = static_cast<int32_t>(num_nt - 1);
  SPINDLE_CHECK(g.productions().size() <= limits.max_rules, "grammar too large: {} productions (limit {})",
                g.productions().size(), limits.max_rules);

  // Productive nonterminals (derive some string): fixed point.
  std::vector<uint8_t> productive(num_nt, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (const Production& p : g.productions()) {
      if (productive[static_cast<size_t>(p.lhs)]) continue;
      bool ok = true;
      for (int32_t s : p.rhs) ok = ok && (Grammar::is_lexeme(s) || productive[static_cast<size_t>(s)]);
      if (ok) productive[static_cast<size_t>(p.lhs)] = 1, changed = true;
    }
  }
  SPINDLE_CHECK(productive[static_cast<size_t>(g.start())],
                "grammar derives no string: rule '{}' never ends", g.name(g.start()));
  c->productions_.push_back({aug, {g.start()}});
  for (const Production& p : g.productions()) {
    bool ok = productive[static_cast<size_t>(p.lhs)] != 0;
    for (int32_t s : p.rhs) ok = ok && (Grammar::is_lexeme(s) || productive[static_cast<size_t>(s)]);
    if (ok) c->productions_.push_back(p);
  }
  c->by_lhs_.assign(num_nt, {});
  for (size_t i = 0; i < c->productions_.size(); ++i) {
    c->by_lhs_[static_cast<size_t>(c->productions_[i].lhs)].push_back(static_cast<uint32_t>(i));
  }
  c->nullable_.assign(num_nt, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (const Production& p : c->productions_) {
      if (c->nullable_[static_cast<size_t>(p.lhs)]) continue;
      bool ok = true;
      for (int32_t s : p.rhs) ok = ok && !Grammar::is_lexeme(s) && c->nullable_[static_cast<size_t>(s)];
      if (ok) c->nullable_[static_cast<size_t>(p.lhs)] = 1, changed = true;
    }
  }
  c->num_lexemes_ = g.num_lexemes();
  c->special_tokens_ = g.special_tokens();
  for (size_t i = 0; i < g.num_lexemes(); ++i) {
    c->nfa_.add_lexeme(*g.lexeme_regex(static_cast<int32_t>(i)), static_cast<int>(i));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    SPINDLE_CHECK(secs <= limits.max_seconds, "grammar compilation exceeded {} s", limits.max_seconds);
  }
  c->nfa_.finalize();
  return c;
}

}  // namespace spindle::grammar
