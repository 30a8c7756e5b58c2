#include "grammar/earley_chart.h"

#include <algorithm>
#include <climits>

namespace spindle::grammar {
namespace {

uint64_t item_key(const EarleyItem& it) {
  return (uint64_t{it.production} << 40) ^ (uint64_t{it.dot} << 28) ^ it.origin ^ (uint64_t{1} << 63);
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

EarleyChart::EarleyChart(const CompiledGrammar* g) : g_(g) {
  predicted_.assign(g->num_nonterminals(), UINT32_MAX);
  lexeme_mark_.assign(g->num_lexemes(), 0);
  table_.assign(64, 0);
  set_begin_.push_back(0);
  ++stamp_;
  add({0, 0, 0});
  close_set();
}

int32_t EarleyChart::next_symbol(const EarleyItem& it) const {
  const Production& p = g_->productions()[it.production];
  return it.dot < p.rhs.size() ? p.rhs[it.dot] : INT32_MAX;
}

bool EarleyChart::add(const EarleyItem& item) {
  const size_t begin = set_begin_.back();
  const size_t n = items_.size() - begin;
  if (n * 2 >= table_.size()) {  // grow and rehash the open set's items
    table_.assign(table_.size() * 2, 0);
    for (size_t i = begin; i < items_.size(); ++i) {
      const uint64_t k = item_key(items_[i]);
      size_t h = mix(k) & (table_.size() - 1);
      while (table_[h] != 0) h = (h + 1) & (table_.size() - 1);
      table_[h] = k;
    }
  }
  const uint64_t k = item_key(item);
  size_t h = mix(k) & (table_.size() - 1);
  while (table_[h] != 0) {
    if (table_[h] == k) return false;
    h = (h + 1) & (table_.size() - 1);
  }
  table_[h] = k;
  items_.push_back(item);
  items_.back().next = next_symbol(item);
  return true;
}

void EarleyChart::close_set() {
  const auto cur = static_cast<uint32_t>(set_begin_.size() - 1);
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const EarleyItem it = items_[i];
    const int32_t sym = it.next;
    if (sym == INT32_MAX) {
      if (it.origin == cur) continue;  // a nullable completion: its prediction already advanced
      const int32_t lhs = g_->productions()[it.production].lhs;
      const size_t end = set_begin_[it.origin + 1];
      for (size_t j = set_begin_[it.origin]; j < end; ++j) {
        if (items_[j].next == lhs) add({items_[j].production, items_[j].dot + 1, items_[j].origin});
      }
    } else if (!Grammar::is_lexeme(sym)) {
      if (predicted_[static_cast<size_t>(sym)] != stamp_) {
        predicted_[static_cast<size_t>(sym)] = stamp_;
        for (uint32_t p : g_->productions_of(sym)) add({p, 0, cur});
      }
      if (g_->nullable(sym)) add({it.production, it.dot + 1, it.origin});
    }
  }
  std::fill(table_.begin(), table_.end(), 0);
}

int32_t EarleyChart::scan(uint32_t from, std::span<const int> lexemes) {
  for (int l : lexemes) lexeme_mark_[static_cast<size_t>(l)] = 1;
  set_begin_.push_back(static_cast<uint32_t>(items_.size()));
  ++stamp_;
  const size_t end = set_begin_[from + 1];
  for (size_t j = set_begin_[from]; j < end; ++j) {
    const int32_t sym = items_[j].next;
    if (sym != INT32_MAX && Grammar::is_lexeme(sym) && lexeme_mark_[static_cast<size_t>(Grammar::lexeme_of(sym))]) {
      add({items_[j].production, items_[j].dot + 1, items_[j].origin});
    }
  }
  for (int l : lexemes) lexeme_mark_[static_cast<size_t>(l)] = 0;
  if (items_.size() == set_begin_.back()) {
    set_begin_.pop_back();
    std::fill(table_.begin(), table_.end(), 0);
    return -1;
  }
  close_set();
  return static_cast<int32_t>(set_begin_.size() - 1);
}

void EarleyChart::truncate(size_t n) {
  if (n >= set_begin_.size()) return;
  items_.resize(set_begin_[n]);
  set_begin_.resize(n);
}

std::vector<int> EarleyChart::expected_lexemes(uint32_t k) const {
  std::vector<int> out;
  for (const EarleyItem& it : set(k)) {
    const int32_t sym = it.next;
    if (sym != INT32_MAX && Grammar::is_lexeme(sym)) out.push_back(Grammar::lexeme_of(sym));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool EarleyChart::accepts(uint32_t k) const {
  for (const EarleyItem& it : set(k)) {
    if (it.production == 0 && it.dot == 1 && it.origin == 0) return true;
  }
  return false;
}

}  // namespace spindle::grammar
