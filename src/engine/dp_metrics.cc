#include "engine/dp_metrics.h"

#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <string_view>

namespace spindle::engine {

namespace {

struct Sample {
  std::string name;    // the sample's name (a histogram's _bucket/_sum/_count included)
  std::string labels;  // between the braces, without them; "" when none
  std::string value;
};

struct Family {
  std::string help, type;  // whole lines, "" when absent
  std::vector<std::string> keys;                 // total series in first-seen order: name + "{" + labels
  std::map<std::string, Sample> totals;          // by key
  std::map<std::string, double> sums;            // by key
  std::map<std::string, int> counts;             // ranks that have the series
  std::vector<std::string> rank_lines;           // every rank's series, labelled
};

bool parse_sample(std::string_view line, Sample& s) {
  const size_t brace = line.find('{');
  const size_t space = line.rfind(' ');
  if (space == std::string_view::npos || space == 0) return false;
  if (brace != std::string_view::npos && brace < space) {
    const size_t close = line.rfind('}');
    if (close == std::string_view::npos || close < brace || close > space) return false;
    s.name = std::string(line.substr(0, brace));
    s.labels = std::string(line.substr(brace + 1, close - brace - 1));
  } else {
    s.name = std::string(line.substr(0, space));
    s.labels.clear();
  }
  s.value = std::string(line.substr(space + 1));
  return !s.name.empty();
}

std::string format_value(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && std::abs(v) < 9e15) {
    return fmt::format("{}", static_cast<int64_t>(v));
  }
  return fmt::format("{}", v);
}

}  // namespace

std::string merge_rank_metrics(const std::vector<std::string>& rank_texts) {
  std::vector<std::string> order;
  std::map<std::string, Family> families;
  const int num_ranks = static_cast<int>(rank_texts.size());
  for (int rank = 0; rank < num_ranks; ++rank) {
    std::string_view text = rank_texts[static_cast<size_t>(rank)];
    std::string current;  // the family of the last # HELP / # TYPE
    while (!text.empty()) {
      const size_t nl = text.find('\n');
      const std::string_view line = text.substr(0, nl);
      text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
      if (line.empty()) continue;
      if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
        const std::string_view rest = line.substr(7);
        current = std::string(rest.substr(0, rest.find(' ')));
        if (!families.count(current)) order.push_back(current);
        Family& f = families[current];
        (line[2] == 'H' ? f.help : f.type) = std::string(line);
        continue;
      }
      Sample s;
      if (line.starts_with('#') || !parse_sample(line, s)) continue;  // comments, malformed lines
      if (current.empty() || !s.name.starts_with(current)) {  // a sample without its family header
        current = s.name;
        if (!families.count(current)) order.push_back(current);
      }
      Family& f = families[current];
      const std::string key = s.name + "{" + s.labels;
      if (!f.totals.count(key)) {
        f.keys.push_back(key);
        f.totals[key] = s;
      }
      f.sums[key] += std::strtod(s.value.c_str(), nullptr);
      ++f.counts[key];
      f.rank_lines.push_back(fmt::format("{}{{dp_rank=\"{}\"{}{}}} {}", s.name, rank, s.labels.empty() ? "" : ",",
                                         s.labels, s.value));
    }
  }
  std::string out;
  for (const std::string& name : order) {
    const Family& f = families.at(name);
    if (!f.help.empty()) out += f.help + "\n";
    if (!f.type.empty()) out += f.type + "\n";
    // Per-rank averages (an accept rate, an accept length) have no exact total from the ranks'
    // values: per rank only; their counters' totals give the pool-wide figure.
    const bool is_gauge = f.type.ends_with(" gauge");
    const bool is_info = name == "spindle_info" || (is_gauge && (name.ends_with("_rate") || name.ends_with("_length")));
    const bool mean = name.ends_with("_ratio") && is_gauge;
    const bool any = name == "spindle_healthy";  // the server serves while any rank does
    if (!is_info) {
      for (const std::string& key : f.keys) {
        const Sample& s = f.totals.at(key);
        double v = f.sums.at(key);
        if (mean) v /= f.counts.at(key);
        if (any) v = v > 0 ? 1 : 0;
        out += s.labels.empty() ? fmt::format("{} {}\n", s.name, format_value(v))
                                : fmt::format("{}{{{}}} {}\n", s.name, s.labels, format_value(v));
      }
    }
    for (const std::string& line : f.rank_lines) out += line + "\n";
  }
  return out;
}

}  // namespace spindle::engine
