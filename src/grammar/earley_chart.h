// The Earley parser's chart over lexemes: set k holds the items after the k-th lexeme.
// Sets are append-only, so truncating the chart is the parser's rollback.
// Nullable nonterminals are handled as Aycock and Horspool do (a prediction of a nullable
// nonterminal also advances the predicting item).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "grammar/grammar.h"

namespace spindle::grammar {

struct EarleyItem {
  uint32_t production = 0;
  uint32_t dot = 0;
  uint32_t origin = 0;  // set index where the production began
  int32_t next = 0;     // the symbol after the dot, INT32_MAX when complete (set by the chart)
};

class EarleyChart {
 public:
  explicit EarleyChart(const CompiledGrammar* g);

  size_t num_sets() const { return set_begin_.size(); }
  // The set of items reached by scanning one of `lexemes` (sorted) after set `from`;
  // -1 (and nothing added) when no item expects any of them.
  int32_t scan(uint32_t from, std::span<const int> lexemes);
  // Drops every set from index n on.
  void truncate(size_t n);
  // The lexemes items of set k expect next (sorted, unique).
  std::vector<int> expected_lexemes(uint32_t k) const;
  // True when set k completes the start symbol from position 0.
  bool accepts(uint32_t k) const;
  std::span<const EarleyItem> set(uint32_t k) const {
    const size_t end = k + 1 < set_begin_.size() ? set_begin_[k + 1] : items_.size();
    return {items_.data() + set_begin_[k], items_.data() + end};
  }

 private:
  bool add(const EarleyItem& item);
  void close_set();
  int32_t next_symbol(const EarleyItem& item) const;  // INT32_MAX when complete (from the grammar)

  const CompiledGrammar* g_;
  std::vector<EarleyItem> items_;
  std::vector<uint32_t> set_begin_;
  // Scratch for the open set: an open-addressing table of item keys and predicted nonterminals.
  std::vector<uint64_t> table_;
  std::vector<uint32_t> predicted_;  // [nonterminals] stamp of the set that predicted it
  uint32_t stamp_ = 0;
  std::vector<uint8_t> lexeme_mark_;
};

}  // namespace spindle::grammar
