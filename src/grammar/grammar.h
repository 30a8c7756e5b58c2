// A context-free grammar over lexemes: the one form every front end (JSON Schema, regex, GBNF,
// choice, json_object) produces and the matcher runs.
//
// Symbols are int32: >= 0 a nonterminal, < 0 the lexeme ~symbol (lexeme_symbol(id) == ~id).
// Lexemes are regular expressions matched by the lazily built DFA; a lexeme ends when the next
// byte cannot continue it (or at the end of the input), so front ends choose lexemes that no
// follower can extend (JSON tokens with their delimiters, single GBNF code points).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/lexer.h"
#include "grammar/regex_ast.h"

namespace spindle::grammar {

struct Production {
  int32_t lhs = 0;
  std::vector<int32_t> rhs;
};

class Grammar {
 public:
  Grammar();

  static constexpr int32_t lexeme_symbol(int32_t lexeme) { return ~lexeme; }
  static constexpr bool is_lexeme(int32_t symbol) { return symbol < 0; }
  static constexpr int32_t lexeme_of(int32_t symbol) { return ~symbol; }

  // The symbol of a lexeme, interned by its canonical form.
  int32_t lexeme(const RegexPtr& re);
  int32_t literal(std::string_view utf8) { return lexeme(re_literal(utf8)); }
  int32_t add_nonterminal(std::string name);
  void add_production(int32_t lhs, std::vector<int32_t> rhs);
  void set_start(int32_t nonterminal) { start_ = nonterminal; }

  // A fresh nonterminal deriving symbol repeated min..max times (max -1 = unbounded).
  int32_t repeat(int32_t symbol, int min, int max, std::string_view name = "rep");
  // A fresh nonterminal deriving one of the sequences.
  int32_t choice(std::vector<std::vector<int32_t>> sequences, std::string_view name = "alt");
  // Copies other's nonterminals and productions into this grammar (its lexemes interned here);
  // returns the symbol of other's start, which derives exactly other's language.
  int32_t embed(const Grammar& other);

  int32_t start() const { return start_; }
  size_t num_nonterminals() const { return names_.size(); }
  size_t num_lexemes() const { return lexemes_.size(); }
  const std::string& name(int32_t nt) const { return names_[static_cast<size_t>(nt)]; }
  const RegexPtr& lexeme_regex(int32_t lexeme) const { return lexemes_[static_cast<size_t>(lexeme)]; }
  const std::vector<Production>& productions() const { return productions_; }
  // Throws when the grammar outgrows the limit on productions.
  void set_max_productions(size_t n) { max_productions_ = n; }

  // Special tokens the grammar may emit as tokens: a special (control) token of the vocabulary
  // whose text is one of these counts as that text's bytes where the grammar accepts them (a
  // tool-call marker such as Mistral's "[TOOL_CALLS]", a control token in its vocabularies and
  // plain text in others). Every other special token still never matches grammar bytes. embed()
  // carries the other grammar's list over.
  void allow_special_token(std::string text);
  const std::vector<std::string>& special_tokens() const { return special_tokens_; }

  // Text form for error messages and debugging.
  std::string to_string() const;

 private:
  std::vector<std::string> names_;
  std::vector<Production> productions_;
  std::vector<RegexPtr> lexemes_;
  std::unordered_map<std::string, int32_t> lexeme_index_;
  std::vector<std::string> special_tokens_;
  int32_t start_ = -1;
  size_t max_productions_ = 1'000'000;
};

// A grammar made ready to match: unproductive productions removed, nullable nonterminals known,
// an augmented start production (index 0: S' -> start), the lexer's NFA built.
class CompiledGrammar {
 public:
  // Throws spindle::Error when the start symbol derives no string or a limit is exceeded.
  static std::shared_ptr<const CompiledGrammar> compile(const Grammar& g, const CompileLimits& limits = {});

  const std::vector<Production>& productions() const { return productions_; }
  // Production indices of nonterminal nt.
  const std::vector<uint32_t>& productions_of(int32_t nt) const { return by_lhs_[static_cast<size_t>(nt)]; }
  bool nullable(int32_t nt) const { return nullable_[static_cast<size_t>(nt)] != 0; }
  size_t num_nonterminals() const { return by_lhs_.size(); }
  size_t num_lexemes() const { return num_lexemes_; }
  const Nfa& nfa() const { return nfa_; }
  const CompileLimits& limits() const { return limits_; }
  int32_t augmented_start() const { return productions_[0].lhs; }
  // Grammar::special_tokens().
  const std::vector<std::string>& special_tokens() const { return special_tokens_; }

 private:
  explicit CompiledGrammar(size_t max_nfa_states) : nfa_(max_nfa_states) {}

  std::vector<Production> productions_;
  std::vector<std::vector<uint32_t>> by_lhs_;
  std::vector<uint8_t> nullable_;
  size_t num_lexemes_ = 0;
  std::vector<std::string> special_tokens_;
  Nfa nfa_;
  CompileLimits limits_;
};

}  // namespace spindle::grammar
